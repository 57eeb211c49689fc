//! Small accessors for the Node fields every controller reads.

use k8s_openapi::api::core::v1::{Node, Taint};

pub(crate) use ccm_provider::node_name;

/// The Node's taints.
pub(crate) fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}
