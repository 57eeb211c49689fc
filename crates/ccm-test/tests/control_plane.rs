//! The harness is real: these tests talk to a real kube-apiserver backed by a
//! real etcd (one shared per test process), with real authentication and RBAC.
//!
//! There is no skip: when the control plane cannot start (for example the
//! binaries are not built), every test fails with the message that says how
//! to get them (`tools/control-plane/build.sh`).

use std::time::Duration;

use ccm_test::fixtures::{NodeBuilder, UNINITIALIZED_TAINT};
use ccm_test::{ControlPlane, eventually, rbac, unique_name};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeCondition};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use serde_json::json;

async fn control_plane() -> &'static ControlPlane {
    ccm_test::init_tracing("ccm_test=info");
    match ControlPlane::shared().await {
        Ok(cp) => cp,
        Err(e) => panic!("{e}"),
    }
}

fn status_code(result: Result<impl Sized, kube::Error>) -> Option<u16> {
    match result {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some(status.code),
        Err(e) => panic!("expected an API error, got {e}"),
    }
}

/// How long an RBAC change may take to reach the authorizer's cache: moments, but not
/// synchronously.
const RBAC_WAIT: Duration = Duration::from_secs(20);

/// A Node of this test binary with the taint a kubelet with `--cloud-provider=external`
/// registers.
fn node(name: &str) -> Node {
    NodeBuilder::new(name)
        .label("ccm-test", "true")
        .uninitialized()
        .build()
}

/// Asserts that listing with `api` is refused (403).
async fn assert_list_forbidden<K>(api: &Api<K>)
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    assert_eq!(
        status_code(api.list(&ListParams::default()).await),
        Some(403)
    );
}

/// The taint a kubelet started with `--cloud-provider=external` registers.
/// (The API server's TaintNodesByCondition admission adds `not-ready` too.)
fn has_uninitialized_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|t| t.key == UNINITIALIZED_TAINT && t.effect == "NoSchedule")
        })
}

fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

#[tokio::test]
async fn server_reports_the_built_version() {
    let cp = control_plane().await;
    let version = cp.client().unwrap().apiserver_version().await.unwrap();
    assert_eq!(version.git_version, ccm_test::KUBERNETES_VERSION);
    assert_eq!(version.major, "1");
}

#[tokio::test]
async fn uninitialized_node_status_patch_arrives_through_a_watch() {
    let cp = control_plane().await;
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    let name = unique_name("node");

    let created = nodes
        .create(&PostParams::default(), &node(&name))
        .await
        .unwrap();
    assert!(has_uninitialized_taint(&created), "{:?}", created.spec);
    assert!(ready_condition(&nodes.get(&name).await.unwrap()).is_none());

    // Watch this one node; the stream starts with its current state.
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(nodes.clone(), config).boxed();
    loop {
        let event = events.try_next().await.unwrap().expect("watch ended");
        if matches!(event, Event::InitDone) {
            break;
        }
    }

    // The status subresource: a merge patch on /status sets the condition.
    let status = json!({
        "status": {
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "set by ccm-test",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]
        }
    });
    let patched = nodes
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(ready_condition(&patched).unwrap().status, "True");

    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match events.try_next().await.unwrap().expect("watch ended") {
                Event::Apply(node) if ready_condition(&node).is_some() => return node,
                _ => {}
            }
        }
    })
    .await
    .expect("the status change did not arrive through the watch in 30 s");
    assert_eq!(seen.metadata.name.as_deref(), Some(name.as_str()));
    let condition = ready_condition(&seen).unwrap();
    assert_eq!(condition.status, "True");
    assert_eq!(condition.reason.as_deref(), Some("KubeletReady"));
    // A status patch leaves the spec (and its taint) alone.
    assert!(has_uninitialized_taint(&seen), "{:?}", seen.spec);

    // And a patch of the main resource cannot change the status.
    let sneaky = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    let after = nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&sneaky))
        .await
        .unwrap();
    assert_eq!(ready_condition(&after).unwrap().status, "True");
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_is_a_conflict() {
    let cp = control_plane().await;
    let namespace = cp.create_namespace("conflict").await.unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &namespace);
    let name = unique_name("cm");
    let created = config_maps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                data: Some([("k".to_owned(), "1".to_owned())].into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    let mut first = created.clone();
    first.data = Some([("k".to_owned(), "2".to_owned())].into());
    let replaced = config_maps
        .replace(&name, &PostParams::default(), &first)
        .await
        .unwrap();
    assert_ne!(
        replaced.metadata.resource_version,
        created.metadata.resource_version
    );

    // `created` still carries the old resourceVersion.
    let mut stale = created;
    stale.data = Some([("k".to_owned(), "3".to_owned())].into());
    let result = config_maps
        .replace(&name, &PostParams::default(), &stale)
        .await;
    assert_eq!(status_code(result), Some(409));
    let current = config_maps.get(&name).await.unwrap();
    assert_eq!(current.data.unwrap()["k"], "2");
}

#[tokio::test]
async fn rbac_forbids_a_user_without_binding_and_allows_one_with() {
    let cp = control_plane().await;
    let admin = cp.client().unwrap();
    let user = unique_name("user");
    let group = unique_name("group");
    // Two groups: both must reach the API server (one O= per group).
    let client = cp
        .client_for_user(&user, &["some-other-group", &group])
        .unwrap();
    let as_user: Api<Node> = Api::all(client);

    assert_list_forbidden(&as_user).await;

    // Grant list on nodes to the user's second group.
    let role = unique_name("node-reader");
    let rules = vec![rbac::rule(&[""], &["nodes"], &["list"])];
    rbac::grant_cluster_role(&admin, &role, rules, rbac::group(&group))
        .await
        .unwrap();

    let list = ListParams::default();
    eventually("listing nodes as the bound group", RBAC_WAIT, || {
        as_user.list(&list)
    })
    .await;
    // Only what was granted: list, not get or delete.
    let some_node = unique_name("absent-node");
    assert_eq!(status_code(as_user.get(&some_node).await), Some(403));

    // A user outside the group is still refused.
    let outsider: Api<Node> = Api::all(cp.client_for_user(&unique_name("user"), &[]).unwrap());
    assert_list_forbidden(&outsider).await;
}

#[tokio::test]
async fn rbac_forbids_a_service_account_without_binding_and_allows_one_with() {
    let cp = control_plane().await;
    let namespace = cp.create_namespace("sa").await.unwrap();
    let account = unique_name("reader");
    let client = cp
        .client_for_service_account(&namespace, &account)
        .await
        .unwrap();
    let as_account: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    assert_list_forbidden(&as_account).await;

    let admin = cp.client().unwrap();
    let rules = vec![rbac::rule(&[""], &["configmaps"], &["list"])];
    let subject = rbac::service_account(&namespace, &account);
    rbac::grant_role(&admin, &namespace, "configmap-reader", rules, subject)
        .await
        .unwrap();

    let list = ListParams::default();
    eventually(
        "listing configmaps as the bound ServiceAccount",
        RBAC_WAIT,
        || as_account.list(&list),
    )
    .await;
    // The binding is namespaced: the default namespace stays closed.
    let elsewhere: Api<ConfigMap> = Api::namespaced(client, "default");
    assert_list_forbidden(&elsewhere).await;
}

// ANCHOR: service_account
#[tokio::test]
async fn the_token_authenticates_as_the_service_account() {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let cp = control_plane().await;
    let namespace = cp.create_namespace("whoami").await.unwrap();
    let client = cp
        .client_for_service_account(&namespace, "robot")
        .await
        .unwrap();
    let review: SelfSubjectReview = Api::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let user = review.status.unwrap().user_info.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some(format!("system:serviceaccount:{namespace}:robot").as_str())
    );
    let groups = user.groups.unwrap();
    assert!(
        groups.iter().any(|g| g == "system:serviceaccounts"),
        "{groups:?}"
    );
}
// ANCHOR_END: service_account

#[tokio::test]
async fn a_user_certificate_carries_name_and_groups() {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let cp = control_plane().await;
    let user = unique_name("carol");
    let client = cp.client_for_user(&user, &["dev", "ops"]).unwrap();
    let review: SelfSubjectReview = Api::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let info = review.status.unwrap().user_info.unwrap();
    assert_eq!(info.username.as_deref(), Some(user.as_str()));
    let groups = info.groups.unwrap();
    for expected in ["dev", "ops", "system:authenticated"] {
        assert!(
            groups.iter().any(|g| g == expected),
            "{expected} not in {groups:?}"
        );
    }
    // The admin is in system:masters.
    let review: SelfSubjectReview = Api::all(cp.client().unwrap())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let info = review.status.unwrap().user_info.unwrap();
    assert_eq!(info.username.as_deref(), Some(ccm_test::ADMIN_USER));
    assert!(info.groups.unwrap().iter().any(|g| g == "system:masters"));
}

#[tokio::test]
async fn kubectl_works_with_the_kubeconfig() {
    let cp = control_plane().await;
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    let name = unique_name("kubectl-node");
    nodes
        .create(&PostParams::default(), &node(&name))
        .await
        .unwrap();

    let mut kubectl = cp
        .kubectl()
        .expect("kubectl not found (tools/control-plane/build.sh builds it)");
    let output = kubectl
        .args(["get", "node", &name, "-o", "jsonpath={.spec.taints[*].key}"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let keys = String::from_utf8_lossy(&output.stdout);
    assert!(
        keys.split_whitespace().any(|k| k == UNINITIALIZED_TAINT),
        "{keys}"
    );
}
