//! JSON Patches (RFC 6902) that change exactly what a controller means to change.
//!
//! Lists the API server replaces whole (a Node's taints, its addresses) are guarded by a
//! `test` of their previous value, so a concurrent writer's change makes the patch fail
//! (and the controller re-read and retry) instead of being overwritten. Map entries
//! (labels) are added one key at a time and need no guard. Where there is no previous value
//! to test, the patch tests the object's `resourceVersion` instead.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Escapes one JSON Pointer segment (`~` → `~0`, `/` → `~1`).
pub(crate) fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Operations that replace the list at `path` with `new`, given that it was `old`
/// (`None` or empty when absent). `resource_version` guards the absent case.
pub(crate) fn replace_list<T: serde::Serialize>(
    path: &str,
    old: Option<&[T]>,
    new: &[T],
    resource_version: Option<&str>,
) -> Vec<Value> {
    match old.filter(|o| !o.is_empty()) {
        Some(old) => {
            let mut ops = vec![json!({"op": "test", "path": path, "value": old})];
            if new.is_empty() {
                ops.push(json!({"op": "remove", "path": path}));
            } else {
                ops.push(json!({"op": "replace", "path": path, "value": new}));
            }
            ops
        }
        None if new.is_empty() => Vec::new(),
        None => {
            let mut ops = guard(resource_version);
            ops.push(json!({"op": "add", "path": path, "value": new}));
            ops
        }
    }
}

/// Operations that set each of `labels`, given the object's current labels.
pub(crate) fn add_labels(
    current: Option<&BTreeMap<String, String>>,
    labels: &BTreeMap<String, String>,
    resource_version: Option<&str>,
) -> Vec<Value> {
    if labels.is_empty() {
        return Vec::new();
    }
    match current {
        Some(_) => labels
            .iter()
            .map(|(k, v)| json!({"op": "add", "path": format!("/metadata/labels/{}", escape(k)), "value": v}))
            .collect(),
        None => {
            let mut ops = guard(resource_version);
            ops.push(json!({"op": "add", "path": "/metadata/labels", "value": labels}));
            ops
        }
    }
}

fn guard(resource_version: Option<&str>) -> Vec<Value> {
    resource_version
        .map(|rv| json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}))
        .into_iter()
        .collect()
}

/// Turns operations into a patch.
pub(crate) fn to_patch(ops: Vec<Value>) -> json_patch::Patch {
    // Every operation above is built from the RFC's own shapes, so this cannot fail; an
    // empty patch is the harmless fallback.
    serde_json::from_value(Value::Array(ops)).unwrap_or(json_patch::Patch(Vec::new()))
}

/// What a patch asks the API server to answer with: the object's metadata only
/// (`PartialObjectMetadata`, as kube's `patch_metadata` asks), not the whole object.
const METADATA_ANSWER: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Patches the object `name` of `api` (its `subresource`, when given) and reads back its
/// metadata only: a controller reads nothing else from the answer to its own write (the
/// new `resourceVersion` and labels), and the API server then encodes the metadata instead
/// of the whole object — for a Node, its status is most of it.
pub(crate) async fn patch_for_metadata<K, P>(
    api: &Api<K>,
    name: &str,
    subresource: Option<&str>,
    params: &PatchParams,
    patch: &Patch<P>,
) -> Result<ObjectMeta, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    P: serde::Serialize + std::fmt::Debug,
{
    let request = patch_request(
        api.resource_url(),
        (name, subresource),
        params,
        patch,
        Some(METADATA_ANSWER),
    )
    .map_err(kube::Error::BuildRequest)?;
    let answer: PartialObjectMeta<K> = api.clone().into_client().request(request).await?;
    Ok(answer.metadata)
}

/// Patches the object `name` of `api` (its `subresource`, when given) and reads back the
/// whole object in protobuf, as the API server sent it (at most `limit` bytes): what a
/// protobuf update of the object is then built from
/// ([`crate::client::protobuf::edit`]).
pub(crate) async fn patch_for_protobuf<K, P>(
    api: &Api<K>,
    name: &str,
    subresource: Option<&str>,
    params: &PatchParams,
    patch: &Patch<P>,
    limit: usize,
) -> Result<bytes::Bytes, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    P: serde::Serialize + std::fmt::Debug,
{
    let request = patch_request(api.resource_url(), (name, subresource), params, patch, None)
        .map_err(kube::Error::BuildRequest)?;
    crate::client::protobuf::send(&api.clone().into_client(), request, limit).await
}

/// The patch request to the collection at `url`, asking for an answer in `accept` (the
/// client's default when `None`).
fn patch_request<P: serde::Serialize + std::fmt::Debug>(
    url: &str,
    target: (&str, Option<&str>),
    params: &PatchParams,
    patch: &Patch<P>,
    accept: Option<&'static str>,
) -> Result<http::Request<Vec<u8>>, kube::core::request::Error> {
    let (name, subresource) = target;
    let request = kube::core::Request::new(url);
    let mut request = match subresource {
        Some(subresource) => request.patch_subresource(subresource, name, params, patch),
        None => request.patch(name, params, patch),
    }?;
    if let Some(accept) = accept {
        request
            .headers_mut()
            .insert(http::header::ACCEPT, http::HeaderValue::from_static(accept));
    }
    Ok(request)
}

/// How a guarded patch failed.
#[derive(Debug)]
pub(crate) enum PatchFailure {
    /// `409 Conflict`: the object changed underneath the patch.
    Conflict,
    /// `422 Invalid`: either a `test` operation failed (the object changed underneath) or
    /// the new value is invalid. The API server does not say which; re-read the object: if
    /// its `resourceVersion` moved, it was a conflict.
    Invalid(kube::Error),
    /// `404 Not Found`: the object is gone.
    Gone,
    /// Anything else.
    Other(kube::Error),
}

impl From<kube::Error> for PatchFailure {
    fn from(err: kube::Error) -> Self {
        match &err {
            kube::Error::Api(s) if s.code == 409 => Self::Conflict,
            kube::Error::Api(s) if s.code == 422 => Self::Invalid(err),
            kube::Error::Api(s) if s.code == 404 => Self::Gone,
            _ => Self::Other(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_ask_for_the_metadata_only() {
        let params = PatchParams {
            field_manager: Some("m".to_owned()),
            ..PatchParams::default()
        };
        let patch = Patch::Json::<()>(to_patch(vec![
            json!({"op": "add", "path": "/spec/providerID", "value": "fake://1"}),
        ]));
        for (sub, path) in [
            (Some("status"), "/api/v1/nodes/n1/status?&fieldManager=m"),
            (None, "/api/v1/nodes/n1?&fieldManager=m"),
        ] {
            let req = patch_request(
                "/api/v1/nodes",
                ("n1", sub),
                &params,
                &patch,
                Some(METADATA_ANSWER),
            )
            .unwrap();
            assert_eq!(req.method(), http::Method::PATCH);
            assert_eq!(req.uri().to_string(), path);
            assert_eq!(req.headers()[http::header::ACCEPT], METADATA_ANSWER);
            assert_eq!(
                req.headers()[http::header::CONTENT_TYPE],
                "application/json-patch+json"
            );
            let body: Value = serde_json::from_slice(req.body()).unwrap();
            assert_eq!(body[0]["path"], "/spec/providerID");
        }
    }

    #[test]
    fn escapes_pointer_segments() {
        assert_eq!(
            escape("topology.kubernetes.io/zone"),
            "topology.kubernetes.io~1zone"
        );
        assert_eq!(escape("a~b"), "a~0b");
    }

    #[test]
    fn list_replacement_is_guarded() {
        let ops = replace_list("/spec/taints", Some(&[1, 2][..]), &[2], Some("7"));
        assert_eq!(
            ops,
            vec![
                json!({"op": "test", "path": "/spec/taints", "value": [1, 2]}),
                json!({"op": "replace", "path": "/spec/taints", "value": [2]}),
            ]
        );
        let ops = replace_list("/spec/taints", Some(&[1][..]), &[] as &[i32], Some("7"));
        assert_eq!(ops[1], json!({"op": "remove", "path": "/spec/taints"}));
        let ops = replace_list::<i32>("/spec/taints", None, &[1], Some("7"));
        assert_eq!(
            ops,
            vec![
                json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}),
                json!({"op": "add", "path": "/spec/taints", "value": [1]}),
            ]
        );
        assert!(replace_list::<i32>("/spec/taints", Some(&[]), &[], None).is_empty());
    }

    #[test]
    fn labels_are_added_per_key() {
        let labels = BTreeMap::from([("example.com/a".to_owned(), "1".to_owned())]);
        let ops = add_labels(Some(&BTreeMap::new()), &labels, Some("3"));
        assert_eq!(
            ops,
            vec![json!({"op": "add", "path": "/metadata/labels/example.com~1a", "value": "1"})]
        );
        let ops = add_labels(None, &labels, Some("3"));
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[1]["path"], "/metadata/labels");
        let patch = to_patch(ops);
        assert_eq!(patch.0.len(), 2);
    }
}
