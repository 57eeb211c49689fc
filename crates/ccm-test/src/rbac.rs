//! RBAC for tests: rules, subjects, and a role granted to a subject in one call, for a test
//! that gives a user, a group or a ServiceAccount some rights on the API server.
//!
//! ```no_run
//! use ccm_test::rbac;
//!
//! # async fn demo(cp: &ccm_test::ControlPlane) -> Result<(), ccm_test::Error> {
//! let admin = cp.client()?;
//! let readers = ccm_test::unique_name("node-readers");
//! let rule = rbac::rule(&[""], &["nodes"], &["list"]);
//! rbac::grant_cluster_role(&admin, &readers, vec![rule], rbac::group(&readers)).await?;
//! let reader = cp.client_for_user("alice", &[&readers])?;
//! # Ok(()) }
//! ```

use std::fmt::Debug;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use kube::api::{Api, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::Error;

/// The API group of RBAC, which role references and group and user subjects name.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// A rule allowing `verbs` on `resources` of `api_groups` (`""` is the core group).
pub fn rule(api_groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(owned(api_groups)),
        resources: Some(owned(resources)),
        verbs: owned(verbs),
        ..PolicyRule::default()
    }
}

/// A rule allowing `verbs` on the non-resource URLs `urls` (such as `/metrics`).
pub fn non_resource_rule(urls: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        non_resource_urls: Some(owned(urls)),
        verbs: owned(verbs),
        ..PolicyRule::default()
    }
}

/// The group `name` as a subject.
pub fn group(name: &str) -> Subject {
    Subject {
        kind: "Group".to_owned(),
        name: name.to_owned(),
        api_group: Some(RBAC_GROUP.to_owned()),
        ..Subject::default()
    }
}

/// The ServiceAccount `namespace/name` as a subject.
pub fn service_account(namespace: &str, name: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".to_owned(),
        name: name.to_owned(),
        namespace: Some(namespace.to_owned()),
        ..Subject::default()
    }
}

/// Creates the ClusterRole `name` with `rules` and the ClusterRoleBinding `name` that grants
/// it to `subject`, with `client` (an admin's).
///
/// # Errors
///
/// API errors (one of the two exists already, `client` may not create them).
pub async fn grant_cluster_role(
    client: &Client,
    name: &str,
    rules: Vec<PolicyRule>,
    subject: Subject,
) -> Result<(), Error> {
    let (roles, bindings) = (Api::all(client.clone()), Api::all(client.clone()));
    grant::<ClusterRole, ClusterRoleBinding>(roles, bindings, name, rules, subject).await
}

/// Creates the Role `name` with `rules` in `namespace` and the RoleBinding `name` there that
/// grants it to `subject`, with `client` (an admin's).
///
/// # Errors
///
/// API errors (one of the two exists already, `client` may not create them).
pub async fn grant_role(
    client: &Client,
    namespace: &str,
    name: &str,
    rules: Vec<PolicyRule>,
    subject: Subject,
) -> Result<(), Error> {
    let roles = Api::namespaced(client.clone(), namespace);
    let bindings = Api::namespaced(client.clone(), namespace);
    grant::<Role, RoleBinding>(roles, bindings, name, rules, subject).await
}

/// Creates the role `name` (of kind `R`) with `rules` in `roles`, and the binding `name` (of
/// kind `B`) that grants it to `subject` in `bindings`.
async fn grant<R, B>(
    roles: Api<R>,
    bindings: Api<B>,
    name: &str,
    rules: Vec<PolicyRule>,
    subject: Subject,
) -> Result<(), Error>
where
    R: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
    B: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let role: R = from_json(json!({"metadata": {"name": name}, "rules": rules}))?;
    let binding: B = from_json(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": R::kind(&()), "name": name},
        "subjects": [subject],
    }))?;
    let pp = PostParams::default();
    roles.create(&pp, &role).await?;
    bindings.create(&pp, &binding).await?;
    Ok(())
}

fn from_json<K: DeserializeOwned>(value: serde_json::Value) -> Result<K, Error> {
    serde_json::from_value(value).map_err(|e| Error::InvalidArgument(e.to_string()))
}

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn as_json(object: impl serde::Serialize) -> Value {
        serde_json::to_value(object).unwrap()
    }

    #[test]
    fn rules_and_subjects_are_spelled_as_kubectl_writes_them() {
        let spelled = [
            (
                as_json(rule(&[""], &["nodes", "nodes/status"], &["get", "patch"])),
                json!({"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "patch"]}),
            ),
            (
                as_json(non_resource_rule(&["/metrics"], &["get"])),
                json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}),
            ),
            (
                as_json(group("readers")),
                json!({"kind": "Group", "name": "readers", "apiGroup": RBAC_GROUP}),
            ),
            (
                as_json(service_account("ns", "robot")),
                json!({"kind": "ServiceAccount", "name": "robot", "namespace": "ns"}),
            ),
        ];
        for (built, want) in spelled {
            assert_eq!(built, want);
        }
    }
}
