//! Writing a provider's own annotations onto a Service (the cloud ID of its load balancer).
//!
//! A [`LoadBalancer`](super::LoadBalancer) gets the Service read-only, yet a provider often
//! wants to remember something on it: the ID its cloud gave the load balancer, so the next
//! lookup is one `GET` by ID instead of a paged list, and a renamed load balancer is neither
//! leaked nor duplicated. Go providers hold a Kubernetes client of their own for this;
//! [`ServiceAnnotator`], from [`InitContext::service_annotator`](super::InitContext::service_annotator),
//! does it with the controller manager's client: one merge patch of exactly the annotation,
//! guarded by the Service's UID, and no request at all when the value is already there.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::{CloudError, CloudResult};

/// Sets and removes annotations on Services (see the module docs).
///
/// Cheap to clone. Each write patches only its key: other annotations, including ones this
/// snapshot of the Service does not know about yet, are left alone; a Service that was
/// deleted and re-created under the same name (another UID) is not touched.
#[derive(Clone)]
pub struct ServiceAnnotator {
    client: kube::Client,
}

impl std::fmt::Debug for ServiceAnnotator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAnnotator").finish_non_exhaustive()
    }
}

impl ServiceAnnotator {
    /// An annotator writing with `client`, which needs `patch` on `services`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// Sets `key` to `value` on `service`. Does nothing when `service` already has it, or
    /// when it stands for a group of Services sharing a load balancer
    /// ([`load_balancer_group`](super::load_balancer_group)): that one is not in the API.
    pub async fn set(&self, service: &Service, key: &str, value: &str) -> CloudResult<()> {
        if current(service, key) == Some(value) || is_group(service) {
            return Ok(());
        }
        self.patch(service, key, Value::from(value)).await
    }

    /// Removes `key` from `service`. Does nothing when `service` does not have it, or when
    /// it stands for a group of Services sharing a load balancer.
    pub async fn remove(&self, service: &Service, key: &str) -> CloudResult<()> {
        if current(service, key).is_none() || is_group(service) {
            return Ok(());
        }
        self.patch(service, key, Value::Null).await
    }

    async fn patch(&self, service: &Service, key: &str, value: Value) -> CloudResult<()> {
        let (Some(namespace), Some(name)) = (
            service.metadata.namespace.as_deref(),
            service.metadata.name.as_deref(),
        ) else {
            return Err(CloudError::msg(
                "annotating a Service: the Service has no namespace or name",
            ));
        };
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(merge_patch(service.metadata.uid.as_deref(), key, value)),
        )
        .await
        .map(drop)
        .map_err(|e| {
            CloudError::provider(
                format!("annotating service {namespace}/{name} with {key}"),
                e,
            )
        })
    }
}

fn current<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// A JSON merge patch (RFC 7386) of one annotation (`null` removes it). The UID, when known,
/// works as a precondition: on an object with another UID the patch would change an
/// immutable field, so the API server refuses it (422, naming `metadata.uid`).
fn merge_patch(uid: Option<&str>, key: &str, value: Value) -> Value {
    let mut metadata = json!({ "annotations": { key: value } });
    if let Some(uid) = uid {
        metadata["uid"] = Value::from(uid);
    }
    json!({ "metadata": metadata })
}

/// Whether `service` stands for a group of Services sharing a load balancer: built by the
/// service controller, not in the API.
fn is_group(service: &Service) -> bool {
    super::load_balancer_group(service).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_is_one_key_guarded_by_uid() {
        assert_eq!(
            merge_patch(Some("u-1"), "example.com/id", Value::from("42")),
            json!({"metadata": {"uid": "u-1", "annotations": {"example.com/id": "42"}}})
        );
        assert_eq!(
            merge_patch(None, "example.com/id", Value::Null),
            json!({"metadata": {"annotations": {"example.com/id": null}}})
        );
    }

    #[test]
    fn reads_the_current_value() {
        let mut svc = Service::default();
        assert_eq!(current(&svc, "k"), None);
        svc.metadata.annotations = Some([("k".to_owned(), "v".to_owned())].into());
        assert_eq!(current(&svc, "k"), Some("v"));
        assert_eq!(current(&svc, "other"), None);
    }
}
