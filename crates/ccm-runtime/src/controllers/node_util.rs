//! Small accessors for the Node fields every controller reads.

use k8s_openapi::api::core::v1::{Node, Taint};

/// The Node's name.
pub(crate) fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

/// The Node's taints.
pub(crate) fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}
