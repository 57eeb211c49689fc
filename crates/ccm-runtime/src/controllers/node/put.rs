//! The Node write of an initialisation as a protobuf update (PUT), as Go's controller makes
//! it, built from the Node's own protobuf so that it keeps every field.
//!
//! The API server spends less on a protobuf PUT of a Node than on our JSON Patch of it
//! (docs/benchmarks.md, table 11: 1.52 ms against 2.11): no JSON to apply a patch to, none
//! to parse. A PUT replaces the whole object, so it is built by editing the bytes the API
//! server answered our status write with, field by field ([`crate::client::protobuf::edit`]):
//! `spec.providerID` set, the plan's labels set, the uninitialized taint's entry dropped, the
//! managed fields left out (the API server keeps its own), and everything else, known to
//! this binary's types or not, sent back as the server wrote it.
//! The PUT carries the Node's `resourceVersion`, so any change since makes it conflict; the
//! controller then writes the guarded JSON Patch instead, which conflicts only on a change
//! of the taints.

use k8s_openapi::api::core::v1::Taint;

use super::decision::InitPlan;
use crate::client::protobuf::edit::{
    edit_message, entries, envelope, retain, set_bytes, set_map_entries,
};
use crate::client::protobuf::schema::NODE;
use crate::client::protobuf::{DecodeError, decode_message};

/// The body of the PUT that writes `plan` onto `node` (a Node's message, without the
/// envelope), or `None` when the Node's taints are no longer `planned_from` (the ones the
/// plan was made from): then the write must be planned again, as the JSON Patch's `test`
/// of the taints would make it.
pub(crate) fn initialization_update(
    node: &[u8],
    planned_from: &[Taint],
    plan: &InitPlan,
) -> Result<Option<Vec<u8>>, DecodeError> {
    let spec = NODE.message("spec");
    let taints_field = spec.number("taints");
    let current = entries(last_message(node, NODE.number("spec"))?, taints_field)?
        .into_iter()
        .map(decode_message::<Taint>)
        .collect::<Result<Vec<_>, _>>()?;
    if current != planned_from {
        return Ok(None);
    }
    let message = edit_message(node, NODE.number("spec"), |old| {
        let mut new = retain(old, taints_field, |entry| {
            Ok(plan.taints.contains(&decode_message::<Taint>(entry)?))
        })?;
        if let Some(id) = &plan.provider_id {
            new = set_bytes(&new, spec.number("providerID"), id.as_bytes())?;
        }
        Ok(new)
    })?;
    // The managed fields are left out: the API server then keeps the Node's own (an
    // update without them never clears them) and has less to read, as Go's informers trim
    // them and its update carries none.
    let meta = NODE.message("metadata");
    let message = edit_message(&message, NODE.number("metadata"), |old| {
        let old = retain(old, meta.number("managedFields"), |_| Ok(false))?;
        if plan.labels.is_empty() {
            Ok(old)
        } else {
            set_map_entries(&old, meta.number("labels"), &plan.labels)
        }
    })?;
    Ok(Some(envelope("v1", "Node", &message)))
}

/// The submessage `number` of `message` (empty when absent).
fn last_message(message: &[u8], number: u32) -> Result<&[u8], DecodeError> {
    Ok(entries(message, number)?.pop().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    use super::*;
    use crate::client::protobuf::wire::{put_bytes, put_varint};
    use crate::client::protobuf::{decode, unwrap};

    const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

    fn string(out: &mut Vec<u8>, number: u32, s: &str) {
        put_bytes(out, number, s.as_bytes());
    }

    fn taint(key: &str, effect: &str) -> Vec<u8> {
        let mut t = Vec::new();
        string(&mut t, 1, key);
        string(&mut t, 3, effect);
        t
    }

    /// A Node as the API server writes it, with a field in the spec and one in a taint that
    /// no type of this binary knows (numbers 90 and 91), and one label.
    fn node_message() -> Vec<u8> {
        let mut meta = Vec::new();
        string(&mut meta, 1, "n1");
        string(&mut meta, 6, "42"); // resourceVersion
        let mut label = Vec::new();
        string(&mut label, 1, "kubernetes.io/hostname");
        string(&mut label, 2, "n1");
        put_bytes(&mut meta, 11, &label);
        let mut managed = Vec::new();
        string(&mut managed, 1, "kubelet"); // manager
        put_bytes(&mut meta, 17, &managed);
        let mut spec = Vec::new();
        string(&mut spec, 1, "10.0.0.0/24"); // podCIDR
        let mut kept = taint("example.com/keep", "NoExecute");
        put_varint(&mut kept, 91 << 3);
        put_varint(&mut kept, 7);
        put_bytes(&mut spec, 5, &kept);
        put_bytes(&mut spec, 5, &taint(UNINITIALIZED, "NoSchedule"));
        string(&mut spec, 90, "a field of a newer Kubernetes");
        let mut node = Vec::new();
        put_bytes(&mut node, 1, &meta);
        put_bytes(&mut node, 2, &spec);
        node
    }

    fn taint_of(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            effect: effect.to_owned(),
            ..Taint::default()
        }
    }

    fn plan() -> InitPlan {
        InitPlan {
            provider_id: Some("fake://n1".to_owned()),
            labels: BTreeMap::from([
                ("topology.kubernetes.io/zone".to_owned(), "z1".to_owned()),
                ("kubernetes.io/hostname".to_owned(), "n1".to_owned()),
            ]),
            taints: vec![taint_of("example.com/keep", "NoExecute")],
            addresses: None,
            warnings: Vec::new(),
        }
    }

    fn planned_from() -> Vec<Taint> {
        vec![
            taint_of("example.com/keep", "NoExecute"),
            taint_of(UNINITIALIZED, "NoSchedule"),
        ]
    }

    #[test]
    fn the_update_writes_the_plan_and_keeps_every_other_field() {
        let body = initialization_update(&node_message(), &planned_from(), &plan())
            .unwrap()
            .unwrap();
        let node: Node = decode(&body).unwrap();
        assert_eq!(
            serde_json::to_value(&node).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "n1", "resourceVersion": "42", "labels": {
                    "kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "z1"}},
                "spec": {"podCIDR": "10.0.0.0/24", "providerID": "fake://n1",
                         "taints": [{"key": "example.com/keep", "effect": "NoExecute"}]},
            })
        );
        assert!(node.metadata.managed_fields.is_none(), "left to the server");
        // The fields no type knows are still there, byte for byte.
        let message = unwrap(&body).unwrap();
        let spec = last_message(message, 2).unwrap();
        assert_eq!(
            crate::client::protobuf::string(spec, 90).unwrap(),
            "a field of a newer Kubernetes"
        );
        let kept = entries(spec, 5).unwrap();
        assert_eq!(kept.len(), 1);
        // field 91 (key 91 << 3 as a varint: 0xd8 0x05), value 7
        assert!(kept[0].ends_with(&[0xd8, 0x05, 0x07]));
    }

    #[test]
    fn taints_changed_since_the_plan_mean_no_update() {
        let mut other = planned_from();
        other.push(taint_of("example.com/new", "NoSchedule"));
        assert_eq!(
            initialization_update(&node_message(), &other, &plan()).unwrap(),
            None
        );
    }

    #[test]
    fn without_a_provider_id_or_labels_only_the_taint_goes() {
        let plan = InitPlan {
            provider_id: None,
            labels: BTreeMap::new(),
            ..plan()
        };
        let body = initialization_update(&node_message(), &planned_from(), &plan)
            .unwrap()
            .unwrap();
        let node: Node = decode(&body).unwrap();
        let spec = node.spec.unwrap();
        assert_eq!(spec.provider_id, None);
        assert_eq!(spec.taints.unwrap().len(), 1);
        assert_eq!(node.metadata.labels.unwrap().len(), 1);
    }

    #[test]
    fn malformed_data_is_an_error() {
        let mut node = node_message();
        node.truncate(node.len() - 3);
        assert!(initialization_update(&node, &planned_from(), &plan()).is_err());
    }
}
