//! The cloud-node-lifecycle controller's decisions, as pure functions of a Node.

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::jiff::Timestamp;

use super::guard::APPROVED_ANNOTATION;

use crate::controllers::node_util::taints;
use ccm_provider::well_known::{LABEL_EXCLUDE_FROM_LIFECYCLE_MANAGEMENT, TAINT_SHUTDOWN};

/// What a pass of the monitor does for one Node, before asking the cloud anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Excluded, or Ready without the shutdown taint: nothing.
    Skip,
    /// Ready but still tainted as shut down: remove the taint.
    RemoveShutdownTaint,
    /// Not Ready (False, Unknown or no condition): ask the cloud whether the instance
    /// exists, and whether it is shut down.
    AskCloud,
}

/// The status of the Node's `Ready` condition; `Unknown` when there is none.
pub(crate) fn ready_status(node: &Node) -> &str {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map_or("Unknown", |c| c.status.as_str())
}

/// When the Node's `Ready` condition last changed, if it says.
pub(crate) fn ready_since(node: &Node) -> Option<Timestamp> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// Whether an operator approved the Node's deletion past the guard
/// ([`APPROVED_ANNOTATION`]` = "true"`).
pub(crate) fn deletion_approved(node: &Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APPROVED_ANNOTATION))
        .is_some_and(|v| v == "true")
}

pub(crate) fn has_shutdown_taint(node: &Node) -> bool {
    taints(node).iter().any(|t| t.key == TAINT_SHUTDOWN)
}

/// What to do with `node` on this pass.
pub(crate) fn check(node: &Node) -> Check {
    let excluded = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_EXCLUDE_FROM_LIFECYCLE_MANAGEMENT));
    if excluded || node.metadata.deletion_timestamp.is_some() {
        return Check::Skip;
    }
    if ready_status(node) == "True" {
        if has_shutdown_taint(node) {
            Check::RemoveShutdownTaint
        } else {
            Check::Skip
        }
    } else {
        Check::AskCloud
    }
}

/// The shutdown taint: effect `NoSchedule`, no value.
pub(crate) fn shutdown_taint() -> Taint {
    Taint {
        key: TAINT_SHUTDOWN.to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Taint::default()
    }
}

/// The Node's taints with the shutdown taint added (unchanged if it is there).
pub(crate) fn with_shutdown_taint(node: &Node) -> Vec<Taint> {
    let mut taints = taints(node).to_vec();
    if !taints.iter().any(|t| t.key == TAINT_SHUTDOWN) {
        taints.push(shutdown_taint());
    }
    taints
}

/// The Node's taints without the shutdown taint.
pub(crate) fn without_shutdown_taint(node: &Node) -> Vec<Taint> {
    taints(node)
        .iter()
        .filter(|t| t.key != TAINT_SHUTDOWN)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};

    use super::*;

    fn node(ready: Option<&str>, shutdown_tainted: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n".into());
        n.status = Some(NodeStatus {
            conditions: ready.map(|s| {
                vec![NodeCondition {
                    type_: "Ready".into(),
                    status: s.into(),
                    ..NodeCondition::default()
                }]
            }),
            ..NodeStatus::default()
        });
        if shutdown_tainted {
            n.spec = Some(NodeSpec {
                taints: Some(vec![shutdown_taint()]),
                ..NodeSpec::default()
            });
        }
        n
    }

    #[test]
    fn not_ready_nodes_are_checked_with_the_cloud() {
        assert_eq!(check(&node(Some("False"), false)), Check::AskCloud);
        assert_eq!(check(&node(Some("Unknown"), false)), Check::AskCloud);
        assert_eq!(
            check(&node(None, false)),
            Check::AskCloud,
            "no condition counts as Unknown"
        );
    }

    #[test]
    fn ready_nodes_lose_the_shutdown_taint() {
        assert_eq!(check(&node(Some("True"), false)), Check::Skip);
        assert_eq!(check(&node(Some("True"), true)), Check::RemoveShutdownTaint);
    }

    #[test]
    fn excluded_nodes_are_skipped() {
        let mut n = node(Some("False"), false);
        n.metadata.labels = Some(BTreeMap::from([(
            LABEL_EXCLUDE_FROM_LIFECYCLE_MANAGEMENT.into(),
            String::new(),
        )]));
        assert_eq!(check(&n), Check::Skip);
    }

    #[test]
    fn readiness_time_and_approval_are_read() {
        let mut n = node(Some("False"), false);
        assert_eq!(ready_since(&n), None);
        let t = Timestamp::from_second(1_700_000_000).unwrap();
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t));
        assert_eq!(ready_since(&n), Some(t));

        assert!(!deletion_approved(&n));
        for (value, approved) in [
            ("true", true),
            ("false", false),
            ("yes", false),
            ("", false),
        ] {
            n.metadata.annotations =
                Some(BTreeMap::from([(APPROVED_ANNOTATION.into(), value.into())]));
            assert_eq!(deletion_approved(&n), approved, "{value:?}");
        }
    }

    #[test]
    fn taint_edits_are_idempotent() {
        let tainted = node(None, true);
        assert_eq!(with_shutdown_taint(&tainted), vec![shutdown_taint()]);
        assert_eq!(
            with_shutdown_taint(&node(None, false)),
            vec![shutdown_taint()]
        );
        assert!(without_shutdown_taint(&tainted).is_empty());
    }
}
