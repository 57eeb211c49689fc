//! JSON Patches (RFC 6902) that change exactly what a controller means to change.
//!
//! Lists the API server replaces whole (a Node's taints, its addresses) are guarded by a
//! `test` of their previous value, so a concurrent writer's change makes the patch fail
//! (and the controller re-read and retry) instead of being overwritten. Map entries
//! (labels) are added one key at a time and need no guard. Where there is no previous value
//! to test, the patch tests the object's `resourceVersion` instead.

use std::collections::BTreeMap;

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
