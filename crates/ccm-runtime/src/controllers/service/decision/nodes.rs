//! Which Nodes a load balancer sends traffic to, and when a load balancer must follow them,
//! as pure functions of Nodes: eligibility (not being deleted, not excluded by label, not
//! marked for deletion by the cluster autoscaler, and this cloud's: see
//! [`NodeOwnership`]), which Node updates can change the set,
//! the [`NodeSet`] (name → provider ID) a load balancer is compared by, and what the
//! node-sync pass does with a Service given the set its load balancer was last given
//! ([`node_sync_step`]). A Service's own selector
//! ([`NODE_SELECTOR_ANNOTATION`](super::super::NODE_SELECTOR_ANNOTATION)) narrows the
//! eligible Nodes further: [`parse_node_selector`], [`select_nodes`], and which Node
//! updates move a Node in or out of a selector ([`selectors_moved`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Service};

use super::super::NODE_SELECTOR_ANNOTATION;
use crate::controllers::node_ownership::{LabelSelector, NodeOwnership};
use crate::controllers::node_util::{node_name, taints};
use ccm_provider::echo::echo;
use ccm_provider::well_known::{
    LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS, TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER,
};

/// The Nodes a load balancer sends traffic to, as the controller compares them: Node name →
/// `spec.providerID` (empty when unset). A change of either is a change of the set.
pub(crate) type NodeSet = BTreeMap<String, String>;

/// Go's `strconv.ParseBool`.
pub(crate) fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Whether the Node may receive load balancer traffic: not being deleted; the
/// `node.kubernetes.io/exclude-from-external-load-balancers` label absent or parsing as
/// false (an empty or unparsable value excludes the Node); no `ToBeDeletedByClusterAutoscaler`
/// taint. Readiness and `spec.providerID` are not considered.
pub(crate) fn is_eligible(node: &Node) -> bool {
    if node.metadata.deletion_timestamp.is_some() {
        return false;
    }
    if let Some(value) = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS))
        && parse_bool(value) != Some(false)
    {
        return false;
    }
    !taints(node)
        .iter()
        .any(|t| t.key == TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER)
}

fn provider_id(node: &Node) -> &str {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or_default()
}

/// Whether a Node update can change some load balancer's Nodes: its eligibility, its
/// provider ID, or whether it is this cloud's changed. (Readiness, addresses, other labels
/// do not matter.)
pub(crate) fn node_update_matters(ownership: &NodeOwnership, old: &Node, new: &Node) -> bool {
    is_eligible(old) != is_eligible(new)
        || provider_id(old) != provider_id(new)
        || ownership.is_owned(old) != ownership.is_owned(new)
}

/// The eligible Nodes, sorted by name: those [`is_eligible`] and this cloud's (a Node of
/// another cloud, or bare metal, is never a backend; logged once, see
/// [`NodeOwnership::check`]).
pub(crate) fn eligible_nodes(
    nodes: impl IntoIterator<Item = Arc<Node>>,
    ownership: &NodeOwnership,
) -> Vec<Arc<Node>> {
    let mut eligible: Vec<Arc<Node>> = nodes
        .into_iter()
        .filter(|n| is_eligible(n) && ownership.check(n))
        .collect();
    eligible.sort_by(|a, b| node_name(a).cmp(node_name(b)));
    eligible
}

/// The set a load balancer is compared by: name → provider ID.
pub(crate) fn node_set(nodes: &[Arc<Node>]) -> NodeSet {
    nodes
        .iter()
        .map(|n| (node_name(n).to_owned(), provider_id(n).to_owned()))
        .collect()
}

/// The Service's node selector ([`NODE_SELECTOR_ANNOTATION`]'s value), if it has one.
pub(crate) fn node_selector_text(service: &Service) -> Option<&str> {
    service
        .metadata
        .annotations
        .as_ref()?
        .get(NODE_SELECTOR_ANNOTATION)
        .map(String::as_str)
}

/// Why a Service's node selector cannot choose its Nodes: the annotation, its value
/// (echoed, so bounded) and what is wrong with it, on one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SelectorError(String);

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads a Service's node selector (`kubectl -l` syntax, by the parser of `--node-selector`,
/// bounded the same way): `Ok(None)` when it has no requirement (an empty value), which
/// selects every eligible Node, as no annotation does.
pub(crate) fn parse_node_selector(text: &str) -> Result<Option<LabelSelector>, SelectorError> {
    match LabelSelector::parse(text) {
        Ok(selector) if selector.selects_all() => Ok(None),
        Ok(selector) => Ok(Some(selector)),
        Err(why) => Err(SelectorError(format!(
            "annotation {NODE_SELECTOR_ANNOTATION} = {:?} is not a label selector: {why}",
            echo(text)
        ))),
    }
}

/// The Nodes of `eligible` whose labels `selector` selects, in the same order.
pub(crate) fn select_nodes(eligible: &[Arc<Node>], selector: &LabelSelector) -> Vec<Arc<Node>> {
    eligible
        .iter()
        .filter(|n| selector.matches(n.metadata.labels.as_ref()))
        .cloned()
        .collect()
}

/// Whether a Node update moves the Node in or out of one of `selectors` (its labels
/// changed, and one of them selects the old labels but not the new, or the reverse).
pub(crate) fn selectors_moved<'a>(
    selectors: impl IntoIterator<Item = &'a LabelSelector>,
    old: &Node,
    new: &Node,
) -> bool {
    let (old, new) = (old.metadata.labels.as_ref(), new.metadata.labels.as_ref());
    old != new
        && selectors
            .into_iter()
            .any(|s| s.matches(old) != s.matches(new))
}

/// What the controller last did to a Service's load balancer, as the node-sync pass sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostsState<'a> {
    /// The load balancer was last given these Nodes successfully.
    Applied(&'a NodeSet),
    /// A worker is syncing the Service right now.
    Syncing,
    /// The last sync failed; the Service waits for its backoff.
    Failing,
    /// Nothing applied (no sync yet, or the load balancer was deleted).
    None,
}

/// What the node-sync pass does with a Service that wants a load balancer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeSyncStep {
    /// Queue it: its load balancer was given other Nodes than the eligible ones now.
    Update,
    /// It is being synced; that sync may have read the Nodes before they changed, so look
    /// again when it ends (queueing it now would run it again at once, past the backoff
    /// of a sync that fails).
    AfterSync,
    /// Nothing: its Nodes are current, or it is failing and its backoff's retry reads the
    /// Nodes afresh, or nothing was applied.
    Nothing,
}

/// What the node-sync pass does with a Service, given what was last applied and the
/// Service's eligible Nodes now (`None`: they cannot be chosen, its node selector is bad;
/// its own sync reports that, and leaves the load balancer as it is).
pub(crate) fn node_sync_step(state: HostsState<'_>, current: Option<&NodeSet>) -> NodeSyncStep {
    match (state, current) {
        (HostsState::Applied(_), Some(current)) if hosts_stale(state, current) => {
            NodeSyncStep::Update
        }
        (HostsState::Syncing, _) => NodeSyncStep::AfterSync,
        _ => NodeSyncStep::Nothing,
    }
}

/// Whether what was applied differs from the eligible Nodes now (only an applied set can).
pub(crate) fn hosts_stale(state: HostsState<'_>, current: &NodeSet) -> bool {
    match state {
        // The same shared set is equal without a look at its N entries.
        HostsState::Applied(applied) => !std::ptr::eq(applied, current) && applied != current,
        HostsState::Syncing | HostsState::Failing | HostsState::None => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ccm_test::fixtures::NodeBuilder;
    use k8s_openapi::api::core::v1::Taint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    #[test]
    fn parse_bool_is_gos() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        for bad in ["", "yes", "no", "tRUE", " true", "2", "on"] {
            assert_eq!(parse_bool(bad), None, "{bad:?}");
        }
    }

    fn node(name: &str) -> Node {
        NodeBuilder::new(name)
            .provider_id(format!("fake://{name}"))
            .build()
    }

    fn labelled(mut n: Node, value: &str) -> Node {
        n.metadata.labels = Some(BTreeMap::from([(
            LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS.to_owned(),
            value.to_owned(),
        )]));
        n
    }

    fn tainted(mut n: Node, key: &str) -> Node {
        n.spec.as_mut().unwrap().taints = Some(vec![Taint {
            key: key.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }]);
        n
    }

    #[test]
    fn eligibility_follows_the_three_rules() {
        assert!(is_eligible(&node("a")));
        assert!(is_eligible(&Node::default()), "nothing set: eligible");
        let mut gone = node("a");
        gone.metadata.deletion_timestamp = Some(Time(Default::default()));
        assert!(!is_eligible(&gone));
        for value in ["false", "0", "f", "F", "FALSE", "False"] {
            assert!(is_eligible(&labelled(node("a"), value)), "{value:?}");
        }
        for value in ["true", "1", "", "yes", "nope", "tRuE"] {
            assert!(!is_eligible(&labelled(node("a"), value)), "{value:?}");
        }
        assert!(!is_eligible(&tainted(
            node("a"),
            TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER
        )));
        assert!(is_eligible(&tainted(node("a"), "example.com/other")));
        assert!(
            is_eligible(&tainted(
                node("a"),
                ccm_provider::well_known::TAINT_UNINITIALIZED
            )),
            "an uninitialised Node still counts"
        );
    }

    #[test]
    fn readiness_and_provider_id_are_not_filters() {
        let mut not_ready = node("a");
        not_ready.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: "False".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(is_eligible(&not_ready));
        let all = NodeOwnership::all();
        let node_update_matters = |old: &Node, new: &Node| node_update_matters(&all, old, new);
        assert!(!node_update_matters(&node("a"), &not_ready));
        let mut no_id = node("a");
        no_id.spec.as_mut().unwrap().provider_id = None;
        assert!(is_eligible(&no_id));
        assert!(
            node_update_matters(&no_id, &node("a")),
            "a provider ID change matters"
        );
        assert!(node_update_matters(
            &node("a"),
            &labelled(node("a"), "true")
        ));
        assert!(!node_update_matters(
            &labelled(node("a"), "true"),
            &labelled(node("a"), "yes")
        ));
        assert!(node_update_matters(
            &node("a"),
            &tainted(node("a"), TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER)
        ));
    }

    #[test]
    fn eligible_nodes_are_sorted_and_mapped_to_provider_ids() {
        let nodes = vec![
            Arc::new(node("c")),
            Arc::new(labelled(node("b"), "true")),
            Arc::new(node("a")),
        ];
        let eligible = eligible_nodes(nodes, &NodeOwnership::all());
        let names: Vec<&str> = eligible.iter().map(|n| node_name(n)).collect();
        assert_eq!(names, ["a", "c"]);
        let set = node_set(&eligible);
        assert_eq!(
            set,
            NodeSet::from([
                ("a".into(), "fake://a".into()),
                ("c".into(), "fake://c".into())
            ])
        );
    }

    #[test]
    fn nodes_that_are_not_this_cloud_s_are_never_backends() {
        let ownership =
            NodeOwnership::new(&["fake://".to_owned()], "!example.com/bare-metal").unwrap();
        let metal_id = NodeBuilder::new("metal-id")
            .provider_id("metal://1")
            .build();
        let mut metal_label = node("metal-label");
        metal_label.metadata.labels = Some(BTreeMap::from([(
            "example.com/bare-metal".into(),
            "".into(),
        )]));
        let nodes = vec![
            Arc::new(node("b")),
            Arc::new(metal_id.clone()),
            Arc::new(metal_label.clone()),
            Arc::new(node("a")),
        ];
        let eligible = eligible_nodes(nodes.clone(), &ownership);
        let names: Vec<&str> = eligible.iter().map(|n| node_name(n)).collect();
        assert_eq!(names, ["a", "b"]);
        // Go's behaviour without the flags: all four.
        assert_eq!(eligible_nodes(nodes, &NodeOwnership::all()).len(), 4);
        // Becoming, or ceasing to be, this cloud's changes the set.
        assert!(node_update_matters(
            &ownership,
            &node("metal-label"),
            &metal_label
        ));
        assert!(!node_update_matters(
            &NodeOwnership::all(),
            &node("metal-label"),
            &metal_label
        ));
        assert!(!node_update_matters(&ownership, &metal_label, &metal_label));
    }

    #[test]
    fn node_set_diff_decides_who_is_resynced() {
        let ab = NodeSet::from([("a".into(), "p://a".into()), ("b".into(), "p://b".into())]);
        let mut ab_moved = ab.clone();
        ab_moved.insert("b".into(), "p://b2".into());
        let a = NodeSet::from([("a".into(), "p://a".into())]);
        assert!(!hosts_stale(HostsState::Applied(&ab), &ab));
        assert!(hosts_stale(HostsState::Applied(&ab), &a), "a Node left");
        assert!(hosts_stale(HostsState::Applied(&a), &ab), "a Node came");
        assert!(
            hosts_stale(HostsState::Applied(&ab), &ab_moved),
            "a provider ID changed"
        );
        assert!(!hosts_stale(HostsState::Syncing, &ab));
        assert!(!hosts_stale(HostsState::Failing, &ab));
        assert!(!hosts_stale(HostsState::None, &ab));
        assert_eq!(
            node_sync_step(HostsState::Applied(&a), Some(&ab)),
            NodeSyncStep::Update
        );
        assert_eq!(
            node_sync_step(HostsState::Applied(&ab), Some(&ab)),
            NodeSyncStep::Nothing
        );
        assert_eq!(
            node_sync_step(HostsState::Syncing, Some(&ab)),
            NodeSyncStep::AfterSync
        );
        assert_eq!(
            node_sync_step(HostsState::Failing, Some(&ab)),
            NodeSyncStep::Nothing
        );
        assert_eq!(
            node_sync_step(HostsState::None, Some(&ab)),
            NodeSyncStep::Nothing
        );
        // Nodes that cannot be chosen (a bad selector): only a sync in flight is looked at
        // again; an applied set is left as it is.
        assert_eq!(
            node_sync_step(HostsState::Applied(&a), None),
            NodeSyncStep::Nothing
        );
        assert_eq!(
            node_sync_step(HostsState::Syncing, None),
            NodeSyncStep::AfterSync
        );
        assert_eq!(
            node_sync_step(HostsState::Failing, None),
            NodeSyncStep::Nothing
        );
        assert!(hosts_stale(HostsState::Applied(&NodeSet::new()), &a));
        assert!(hosts_stale(HostsState::Applied(&a), &NodeSet::new()));
        let shared = std::sync::Arc::new(ab.clone());
        assert!(
            !hosts_stale(HostsState::Applied(&shared), &shared),
            "one shared set"
        );
    }

    fn pool(name: &str, pool: Option<&str>) -> Arc<Node> {
        let mut n = node(name);
        n.metadata.labels = pool.map(|p| BTreeMap::from([("pool".to_owned(), p.to_owned())]));
        Arc::new(n)
    }

    fn names(nodes: &[Arc<Node>]) -> Vec<&str> {
        nodes.iter().map(|n| node_name(n)).collect()
    }

    #[test]
    fn a_service_s_selector_is_its_annotation() {
        let mut svc = Service::default();
        assert_eq!(node_selector_text(&svc), None);
        svc.metadata.annotations = Some(BTreeMap::from([(
            "example.com/other".to_owned(),
            "pool=a".to_owned(),
        )]));
        assert_eq!(node_selector_text(&svc), None);
        svc.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(NODE_SELECTOR_ANNOTATION.to_owned(), "pool=a".to_owned());
        assert_eq!(node_selector_text(&svc), Some("pool=a"));
    }

    #[test]
    fn a_node_selector_narrows_the_eligible_nodes() {
        let eligible = vec![
            pool("a1", Some("a")),
            pool("b1", Some("b")),
            pool("none", None),
            pool("a2", Some("a")),
        ];
        let select = |text: &str| {
            let selector = parse_node_selector(text).unwrap().expect("requirements");
            select_nodes(&eligible, &selector)
        };
        assert_eq!(names(&select("pool=a")), ["a1", "a2"], "the order is kept");
        assert_eq!(names(&select("pool!=a")), ["b1", "none"]);
        assert_eq!(names(&select("pool in (a,b)")), ["a1", "b1", "a2"]);
        assert_eq!(names(&select("!pool")), ["none"]);
        assert_eq!(names(&select("pool=c")), Vec::<&str>::new());
        // No requirement: every eligible Node, as without the annotation.
        assert_eq!(parse_node_selector("").unwrap(), None);
        assert_eq!(parse_node_selector("  ").unwrap(), None);
    }

    #[test]
    fn a_bad_node_selector_names_the_annotation_and_the_fault() {
        let err = parse_node_selector("pool in a").unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "annotation {NODE_SELECTOR_ANNOTATION} = \"pool in a\" is not a label selector: "
            )),
            "{err}"
        );
        assert!(err.ends_with("found 'a', expected: '('"), "{err}");
        assert!(
            parse_node_selector("pool>1").is_err(),
            "no numeric operators"
        );
        assert!(parse_node_selector("Bad Key=x").is_err());
        // However long the value, the message is one bounded line.
        let long = format!("pool in ({})", "a,".repeat(100_000));
        let err = parse_node_selector(&long).unwrap_err().to_string();
        assert!(err.len() < 700, "{}", err.len());
        assert!(err.contains("at most 4096"), "{err}");
        let many = (0..65)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let err = parse_node_selector(&many).unwrap_err().to_string();
        assert!(err.contains("more than 64 requirements"), "{err}");
    }

    #[test]
    fn a_label_change_matters_when_it_moves_a_node_across_a_selector() {
        let a = LabelSelector::parse("pool=a").unwrap();
        let gpu = LabelSelector::parse("gpu").unwrap();
        let (in_a, in_b, bare) = (pool("n", Some("a")), pool("n", Some("b")), pool("n", None));
        assert!(selectors_moved([&a], &in_a, &in_b), "leaves pool=a");
        assert!(selectors_moved([&a], &bare, &in_a), "joins pool=a");
        assert!(!selectors_moved([&a], &in_b, &bare), "outside both times");
        assert!(!selectors_moved([&gpu], &in_a, &in_b), "another selector");
        assert!(selectors_moved([&gpu, &a], &in_a, &in_b), "any selector");
        assert!(!selectors_moved([], &in_a, &in_b), "no selector in use");
        assert!(!selectors_moved([&a], &in_a, &in_a), "no label change");
    }
}
