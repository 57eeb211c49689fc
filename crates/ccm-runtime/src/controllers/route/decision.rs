//! The route controller's decisions, as pure functions: the plan (listed routes + Nodes →
//! deletes, creates, NetworkUnavailable conditions), the condition to write, and which Node
//! changes call for a reconcile.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::cidr::{Cidr, match_key};
use crate::controllers::node_util::node_name;
use ccm_provider::Route;
use ccm_provider::well_known::CONDITION_NETWORK_UNAVAILABLE;

/// `NetworkUnavailable` reason when every route of the Node is in place.
pub(crate) const REASON_ROUTE_CREATED: &str = "RouteCreated";
/// `NetworkUnavailable` reason when a route of the Node is missing.
pub(crate) const REASON_NO_ROUTE_CREATED: &str = "NoRouteCreated";

/// Why a listed route is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeleteReason {
    /// The cloud marks it a blackhole (its target is gone).
    Blackhole,
    /// It has no target Node.
    NoTarget,
    /// No Node wants it: the Node is gone, or its pod CIDR is another.
    Unwanted,
    /// The Node's addresses changed; it is deleted and created again.
    AddressesChanged,
}

impl DeleteReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Blackhole => "blackhole",
            Self::NoTarget => "no target node",
            Self::Unwanted => "no node wants it",
            Self::AddressesChanged => "node addresses changed",
        }
    }
}

/// A listed route to delete.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Delete {
    /// The route as listed.
    pub(crate) route: Route,
    /// Its destination's match key.
    pub(crate) key: String,
    pub(crate) reason: DeleteReason,
    /// Whether creates wait for this delete: always when the provider routes by node
    /// address, else when a create of this plan wants the same destination.
    pub(crate) blocking: bool,
}

/// A route to create.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Create {
    /// `{target_node, target_node_addresses, destination_cidr}`.
    pub(crate) route: Route,
    /// The destination's match key.
    pub(crate) key: String,
    /// A delete of this plan frees the destination first; if it fails, this create is not
    /// attempted.
    pub(crate) after_delete: bool,
}

/// The creates one Node needs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NodeCreates {
    pub(crate) node: String,
    /// The Node's UID, the creates' name hint.
    pub(crate) uid: String,
    pub(crate) creates: Vec<Create>,
    /// Whether the Node's other pod CIDRs are routed (kept): if one is blocked, the Node
    /// stays `NoRouteCreated` whatever these creates do.
    pub(crate) others_routed: bool,
    /// Whether another pod CIDR of the Node has a cloud call in flight from an earlier
    /// pass: its outcome is unknown, so these creates leave the condition alone.
    pub(crate) pending: bool,
}

/// A route a Node needs that this plan does not create, because the listed routes already
/// have one for that destination that is not deleted (outside the cluster CIDRs, or kept
/// for another Node), or another Node claims the same destination.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Blocked {
    pub(crate) node: String,
    pub(crate) uid: String,
    pub(crate) cidr: String,
    pub(crate) why: String,
}

/// What one reconcile does.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Plan {
    pub(crate) deletes: Vec<Delete>,
    /// Per Node, the routes to create; the Node's condition is written once they are done.
    pub(crate) creates: Vec<NodeCreates>,
    pub(crate) blocked: Vec<Blocked>,
    /// Conditions decided now, by Node name: `true` for `RouteCreated` (every route of the
    /// Node is kept), `false` for `NoRouteCreated` (a route is blocked, or the Node has
    /// routes but no pod CIDR).
    pub(crate) conditions: Vec<(String, bool)>,
}

impl Plan {
    /// Number of creates.
    pub(crate) fn create_count(&self) -> usize {
        self.creates.iter().map(|n| n.creates.len()).sum()
    }
}

/// The Node's pod CIDRs: `spec.podCIDRs`, or `spec.podCIDR` when that list is empty.
pub(crate) fn pod_cidrs(node: &Node) -> Vec<&str> {
    let Some(spec) = node.spec.as_ref() else {
        return Vec::new();
    };
    match spec.pod_cidrs.as_deref() {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(String::as_str)
            .filter(|c| !c.is_empty())
            .collect(),
        _ => spec
            .pod_cidr
            .as_deref()
            .filter(|c| !c.is_empty())
            .into_iter()
            .collect(),
    }
}

/// The Node's `status.addresses`.
pub(crate) fn addresses(node: &Node) -> &[NodeAddress] {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default()
}

/// Go's `equalNodeAddrs`: same length, and every address of `a` is in `b`.
pub(crate) fn same_addresses(a: &[NodeAddress], b: &[NodeAddress]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// Whether a route's destination is this controller's to delete: its first or last address
/// is inside a cluster CIDR. A destination that does not parse never is.
pub(crate) fn is_responsible_for(cluster_cidrs: &[Cidr], destination: &str) -> bool {
    Cidr::parse(destination)
        .is_ok_and(|d| cluster_cidrs.iter().any(|c| c.contains_either_end_of(&d)))
}

/// The plan for one reconcile: `routes` as the cloud listed them, the cached `nodes` that
/// are this cloud's, the names of the cached Nodes that are not (`foreign`), the cluster
/// CIDRs, and the destinations (match keys) with a create or delete still in flight from an
/// earlier pass, taken *before* the routes were listed. Busy destinations are left alone
/// entirely: no create, no delete, no condition from them. So is a listed route whose
/// target is a foreign Node: it is never deleted or replaced, and blocks a create for its
/// destination like a route outside the cluster CIDRs (a foreign Node itself gets no route
/// and no condition: it is not among `nodes`).
///
/// Per Node pod CIDR (from `spec.podCIDRs`, else `spec.podCIDR`): a listed route for the
/// Node with that destination that is not a blackhole is kept if the provider does not
/// route by address or the addresses are set-equal, and replaced (deleted, then created)
/// if they differ; with none, a route is created. Listed routes inside a cluster CIDR that
/// are not kept are deleted: blackholes, routes without a target, routes no Node wants,
/// and replaced ones. A route outside the cluster CIDRs is never deleted. A create is
/// never planned for a destination the listed routes still have after the deletes.
pub(crate) fn plan(
    routes: &[Route],
    nodes: &[Arc<Node>],
    foreign: &HashSet<String>,
    cluster_cidrs: &[Cidr],
    busy: &HashSet<String>,
) -> Plan {
    // Go decides from the first listed route; any route that says so is a safer signal.
    let by_address = routes.iter().any(|r| r.enable_node_addresses);
    let keys: Vec<String> = routes
        .iter()
        .map(|r| match_key(&r.destination_cidr))
        .collect();
    let mut by_node: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, r) in routes.iter().enumerate() {
        if !r.target_node.is_empty() {
            by_node.entry(r.target_node.as_str()).or_default().push(i);
        }
    }

    let mut nodes: Vec<&Node> = nodes.iter().map(AsRef::as_ref).collect();
    nodes.sort_by(|a, b| node_name(a).cmp(node_name(b)));

    let mut kept = vec![false; routes.len()];
    let mut replaced = vec![false; routes.len()];
    // Per Node: the creates it wants (cidr, key), whether one of its keys is busy.
    struct Wants<'a> {
        node: &'a Node,
        adds: Vec<(&'a str, String)>,
        pending: bool,
    }
    let mut wants = Vec::new();
    let mut plan = Plan::default();

    for node in nodes {
        let name = node_name(node);
        let own = by_node.get(name).map(Vec::as_slice).unwrap_or_default();
        let cidrs = pod_cidrs(node);
        if cidrs.is_empty() {
            if !own.is_empty() {
                plan.conditions.push((name.to_owned(), false));
            }
            continue;
        }
        let node_addresses = addresses(node);
        let mut w = Wants {
            node,
            adds: Vec::new(),
            pending: false,
        };
        for cidr in cidrs {
            let key = match_key(cidr);
            if busy.contains(&key) {
                w.pending = true;
                continue;
            }
            let matching: Vec<usize> = own
                .iter()
                .copied()
                .filter(|&i| keys[i] == key && !routes[i].blackhole)
                .collect();
            let keep: Vec<usize> = matching
                .iter()
                .copied()
                .filter(|&i| {
                    !routes[i].enable_node_addresses
                        || same_addresses(node_addresses, &routes[i].target_node_addresses)
                })
                .collect();
            if !keep.is_empty() {
                for i in keep {
                    kept[i] = true;
                }
            } else {
                for i in matching {
                    replaced[i] = true;
                }
                w.adds.push((cidr, key));
            }
        }
        wants.push(w);
    }

    let mut deleted = vec![false; routes.len()];
    for (i, route) in routes.iter().enumerate() {
        if kept[i]
            || busy.contains(&keys[i])
            || foreign.contains(&route.target_node)
            || !is_responsible_for(cluster_cidrs, &route.destination_cidr)
        {
            continue;
        }
        let reason = if route.blackhole {
            DeleteReason::Blackhole
        } else if route.target_node.is_empty() {
            DeleteReason::NoTarget
        } else if replaced[i] {
            DeleteReason::AddressesChanged
        } else {
            DeleteReason::Unwanted
        };
        deleted[i] = true;
        plan.deletes.push(Delete {
            route: route.clone(),
            key: keys[i].clone(),
            reason,
            blocking: by_address,
        });
    }
    let deleted_keys: HashSet<&str> = plan.deletes.iter().map(|d| d.key.as_str()).collect();

    let mut claimed: HashMap<String, String> = HashMap::new();
    let mut create_keys = BTreeSet::new();
    for w in wants {
        let name = node_name(w.node);
        let uid = w.node.metadata.uid.clone().unwrap_or_default();
        let mut creates = Vec::new();
        let mut blocked = false;
        for (cidr, key) in w.adds {
            let why = if let Some(i) = (0..routes.len()).find(|&i| keys[i] == key && !deleted[i]) {
                let r = &routes[i];
                Some(format!(
                    "the cloud already has route {:?} for {} (target node {:?}{}), which this \
                     controller does not delete{}",
                    r.name,
                    r.destination_cidr,
                    r.target_node,
                    if r.blackhole { ", blackhole" } else { "" },
                    if foreign.contains(&r.target_node) {
                        ": its target node is not this cloud's"
                    } else if is_responsible_for(cluster_cidrs, &r.destination_cidr) {
                        ""
                    } else {
                        ": it is outside the cluster CIDRs"
                    },
                ))
            } else {
                claimed.get(&key).map(|other| {
                    format!("node {other} has the same pod CIDR; its route is created first")
                })
            };
            if let Some(why) = why {
                blocked = true;
                plan.blocked.push(Blocked {
                    node: name.to_owned(),
                    uid: uid.clone(),
                    cidr: cidr.to_owned(),
                    why,
                });
                continue;
            }
            claimed.insert(key.clone(), name.to_owned());
            create_keys.insert(key.clone());
            let mut route = Route::new(name, cidr);
            route.target_node_addresses = addresses(w.node).to_vec();
            creates.push(Create {
                after_delete: deleted_keys.contains(key.as_str()),
                route,
                key,
            });
        }
        if !creates.is_empty() {
            plan.creates.push(NodeCreates {
                node: name.to_owned(),
                uid,
                creates,
                others_routed: !blocked,
                pending: w.pending,
            });
        } else if !w.pending {
            plan.conditions.push((name.to_owned(), !blocked));
        }
    }
    for d in &mut plan.deletes {
        d.blocking |= create_keys.contains(&d.key);
    }
    plan
}

/// The `NetworkUnavailable` condition to write on `node`, or `None` when its status and
/// reason are already right (Go 1.36 skips the patch only then). The transition time moves
/// only when the status changes.
pub(crate) fn network_condition(
    node: &Node,
    routes_created: bool,
    now: &Time,
) -> Option<NodeCondition> {
    let (status, reason, message) = if routes_created {
        (
            "False",
            REASON_ROUTE_CREATED,
            "RouteController created a route",
        )
    } else {
        (
            "True",
            REASON_NO_ROUTE_CREATED,
            "RouteController failed to create a route",
        )
    };
    let current = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == CONDITION_NETWORK_UNAVAILABLE));
    if current.is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason)) {
        return None;
    }
    let last_transition_time = current
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    Some(NodeCondition {
        type_: CONDITION_NETWORK_UNAVAILABLE.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(last_transition_time),
    })
}

/// Whether a Node change can change the plan: a new Node with pod CIDRs, a new UID
/// (re-registered), other pod CIDRs, or other addresses of a Node with pod CIDRs. Status
/// heartbeats and condition writes (our own included) do not, nor do the writes that
/// initialise a Node before it has a pod CIDR; the periodic reconcile covers the rest.
pub(crate) fn affects_routes(old: Option<&Node>, new: &Node) -> bool {
    let routed = |n: &Node| !pod_cidrs(n).is_empty();
    match old {
        None => routed(new),
        Some(old) => {
            old.metadata.uid != new.metadata.uid
                || pod_cidrs(old) != pod_cidrs(new)
                || ((routed(old) || routed(new)) && addresses(old) != addresses(new))
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};

    use super::*;
    use ccm_provider::node_address;

    fn cluster() -> Vec<Cidr> {
        vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:10:244::/48".parse().unwrap(),
        ]
    }

    fn node(name: &str, cidrs: &[&str]) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.uid = Some(format!("uid-{name}"));
        n.spec = Some(NodeSpec {
            pod_cidrs: Some(cidrs.iter().map(|c| (*c).to_owned()).collect()),
            pod_cidr: cidrs.first().map(|c| (*c).to_owned()),
            ..NodeSpec::default()
        });
        n.status = Some(NodeStatus {
            addresses: Some(vec![node_address(
                "InternalIP",
                format!("192.0.2.{}", name.len()),
            )]),
            ..NodeStatus::default()
        });
        Arc::new(n)
    }

    fn with_addresses(node: &Arc<Node>, addresses: Vec<NodeAddress>) -> Arc<Node> {
        let mut n = (**node).clone();
        n.status.as_mut().unwrap().addresses = Some(addresses);
        Arc::new(n)
    }

    fn route(name: &str, target: &str, cidr: &str) -> Route {
        Route::new(target, cidr).with_name(name)
    }

    /// The plan when every Node is this cloud's.
    fn plan(
        routes: &[Route],
        nodes: &[Arc<Node>],
        cluster_cidrs: &[Cidr],
        busy: &HashSet<String>,
    ) -> Plan {
        super::plan(routes, nodes, &HashSet::new(), cluster_cidrs, busy)
    }

    #[test]
    fn routes_of_nodes_that_are_not_this_cloud_s_are_left_alone() {
        let a = node("a", &["10.244.1.0/24"]);
        let foreign: HashSet<String> = ["metal".to_owned()].into();
        let routes = vec![
            // The foreign Node's route, and its blackhole: neither is deleted.
            route("r-metal", "metal", "10.244.9.0/24"),
            route("r-metal-bh", "metal", "10.244.8.0/24").with_blackhole(true),
            // A route to a Node that no longer exists at all is deleted, as before.
            route("r-gone", "gone", "10.244.7.0/24"),
            // The foreign Node claims the destination an owned Node wants.
            route("r-clash", "metal", "10.244.1.0/24"),
        ];
        let p = super::plan(&routes, &[a], &foreign, &cluster(), &no_busy());
        let deleted: Vec<&str> = p.deletes.iter().map(|d| d.route.name.as_str()).collect();
        assert_eq!(deleted, ["r-gone"]);
        assert_eq!(p.create_count(), 0);
        assert_eq!(p.blocked.len(), 1);
        assert_eq!(p.blocked[0].node, "a");
        assert!(
            p.blocked[0]
                .why
                .contains("its target node is not this cloud's"),
            "{}",
            p.blocked[0].why
        );
        assert_eq!(p.conditions, vec![("a".to_owned(), false)]);
        // Without the foreign set (Go's behaviour), all four go.
        let go = plan(
            &routes,
            &[node("a", &["10.244.1.0/24"])],
            &cluster(),
            &no_busy(),
        );
        assert_eq!(go.deletes.len(), 4);
    }

    fn no_busy() -> HashSet<String> {
        HashSet::new()
    }

    fn created(plan: &Plan) -> Vec<(String, String, String)> {
        plan.creates
            .iter()
            .flat_map(|n| {
                n.creates.iter().map(|c| {
                    (
                        n.uid.clone(),
                        c.route.target_node.clone(),
                        c.route.destination_cidr.clone(),
                    )
                })
            })
            .collect()
    }

    fn deleted(plan: &Plan) -> Vec<(&str, DeleteReason)> {
        plan.deletes
            .iter()
            .map(|d| (d.route.name.as_str(), d.reason))
            .collect()
    }

    #[test]
    fn new_nodes_get_one_route_per_pod_cidr_named_by_uid() {
        let a = node("a", &["10.244.1.0/24"]);
        let b = node("bb", &["10.244.2.0/24", "fd00:10:244:2::/64"]);
        let plan = plan(&[], &[b.clone(), a.clone()], &cluster(), &no_busy());
        assert_eq!(
            created(&plan),
            vec![
                ("uid-a".into(), "a".into(), "10.244.1.0/24".into()),
                ("uid-bb".into(), "bb".into(), "10.244.2.0/24".into()),
                ("uid-bb".into(), "bb".into(), "fd00:10:244:2::/64".into()),
            ]
        );
        let create = &plan.creates[0].creates[0];
        assert_eq!(create.route.target_node_addresses, addresses(&a));
        assert!(!create.route.enable_node_addresses, "as Go creates it");
        assert!(!create.after_delete);
        assert!(plan.deletes.is_empty());
        assert!(plan.blocked.is_empty());
        assert!(plan.conditions.is_empty(), "decided after the creates");
        assert!(plan.creates.iter().all(|n| n.others_routed && !n.pending));
        assert_eq!(plan.create_count(), 3);
    }

    #[test]
    fn pod_cidr_is_the_fallback_for_an_empty_pod_cidrs() {
        let mut n = (*node("a", &[])).clone();
        n.spec.as_mut().unwrap().pod_cidr = Some("10.244.7.0/24".into());
        assert_eq!(pod_cidrs(&n), vec!["10.244.7.0/24"]);
        n.spec.as_mut().unwrap().pod_cidrs = None;
        assert_eq!(pod_cidrs(&n), vec!["10.244.7.0/24"]);
        let plan = plan(&[], &[Arc::new(n)], &cluster(), &no_busy());
        assert_eq!(created(&plan).len(), 1);
        assert!(pod_cidrs(&Node::default()).is_empty());
    }

    #[test]
    fn existing_routes_are_kept_and_nodes_marked_routed() {
        let a = node("a", &["10.244.1.0/24", "fd00:10:244:1::/64"]);
        let routes = [
            route("r1", "a", "10.244.1.0/24"),
            // The cloud spells the IPv6 network differently: still the same route.
            route("r2", "a", "fd00:10:244:1:0::/64"),
        ];
        let plan = plan(&routes, &[a], &cluster(), &no_busy());
        assert!(plan.creates.is_empty());
        assert!(plan.deletes.is_empty());
        assert_eq!(plan.conditions, vec![("a".to_owned(), true)]);
    }

    #[test]
    fn only_listed_routes_inside_the_cluster_cidrs_are_deleted() {
        let a = node("a", &["10.244.1.0/24"]);
        let routes = [
            route("keep", "a", "10.244.1.0/24"),
            route("gone-node", "b", "10.244.2.0/24"),
            route("old-cidr", "a", "10.244.9.0/24"),
            route("no-target", "", "10.244.3.0/24"),
            route("hole", "c", "10.244.4.0/24").with_blackhole(true),
            route("v6-gone", "d", "fd00:10:244:5::/64"),
            // Outside the cluster CIDRs: never touched, whatever they look like.
            route("foreign", "b", "192.168.0.0/24"),
            route("foreign-hole", "", "172.16.0.0/24").with_blackhole(true),
            route("foreign-v6", "b", "fd00:99::/64"),
            route("unparseable", "", "not-a-cidr"),
        ];
        let plan = plan(&routes, &[a], &cluster(), &no_busy());
        assert_eq!(
            deleted(&plan),
            vec![
                ("gone-node", DeleteReason::Unwanted),
                ("old-cidr", DeleteReason::Unwanted),
                ("no-target", DeleteReason::NoTarget),
                ("hole", DeleteReason::Blackhole),
                ("v6-gone", DeleteReason::Unwanted),
            ]
        );
        assert!(plan.deletes.iter().all(|d| !d.blocking));
        assert_eq!(plan.deletes[0].route, routes[1], "deleted as listed");
        assert_eq!(plan.conditions, vec![("a".to_owned(), true)]);
    }

    #[test]
    fn a_route_straddling_the_cluster_cidr_counts_as_inside() {
        let routes = [
            route("wide", "x", "10.244.0.0/15"),
            route("outside", "x", "10.0.0.0/8"),
        ];
        let plan = plan(&routes, &[], &cluster(), &no_busy());
        assert_eq!(deleted(&plan), vec![("wide", DeleteReason::Unwanted)]);
    }

    #[test]
    fn changed_addresses_replace_the_route_deletes_first() {
        let a = node("a", &["10.244.1.0/24"]);
        let b = node("b", &["10.244.2.0/24"]);
        let c = node("c", &["10.244.3.0/24"]);
        let two = vec![
            node_address("InternalIP", "10.0.0.1"),
            node_address("Hostname", "b"),
        ];
        let b = with_addresses(&b, two.clone());
        let routes = [
            // a's addresses moved on.
            route("ra", "a", "10.244.1.0/24")
                .with_node_addresses(vec![node_address("InternalIP", "10.9.9.9")]),
            // b's are the same set, in another order.
            route("rb", "b", "10.244.2.0/24").with_node_addresses(two.into_iter().rev().collect()),
            route("stale", "gone", "10.244.8.0/24"),
        ];
        let plan = plan(&routes, &[a, b, c], &cluster(), &no_busy());
        assert_eq!(
            deleted(&plan),
            vec![
                ("ra", DeleteReason::AddressesChanged),
                ("stale", DeleteReason::Unwanted)
            ]
        );
        assert!(
            plan.deletes.iter().all(|d| d.blocking),
            "a provider routing by address gets every delete before any create"
        );
        let creates = created(&plan);
        assert_eq!(
            creates,
            vec![
                ("uid-a".into(), "a".into(), "10.244.1.0/24".into()),
                ("uid-c".into(), "c".into(), "10.244.3.0/24".into()),
            ]
        );
        assert!(plan.creates[0].creates[0].after_delete);
        assert!(!plan.creates[1].creates[0].after_delete);
        assert_eq!(plan.conditions, vec![("b".to_owned(), true)]);
    }

    #[test]
    fn addresses_are_ignored_unless_the_provider_routes_by_them() {
        let a = node("a", &["10.244.1.0/24"]);
        let mut r = route("ra", "a", "10.244.1.0/24");
        r.target_node_addresses = vec![node_address("InternalIP", "10.9.9.9")];
        let plan = plan(&[r], &[a], &cluster(), &no_busy());
        assert!(plan.deletes.is_empty() && plan.creates.is_empty());
    }

    #[test]
    fn a_blackhole_route_of_a_live_node_is_replaced() {
        let a = node("a", &["10.244.1.0/24"]);
        let routes = [route("ra", "a", "10.244.1.0/24").with_blackhole(true)];
        let plan = plan(&routes, &[a], &cluster(), &no_busy());
        assert_eq!(deleted(&plan), vec![("ra", DeleteReason::Blackhole)]);
        assert!(
            plan.deletes[0].blocking,
            "the create of that CIDR waits for it"
        );
        assert!(plan.creates[0].creates[0].after_delete);
    }

    #[test]
    fn a_cidr_moving_between_nodes_is_deleted_before_it_is_created() {
        let b = node("b", &["10.244.1.0/24"]);
        let routes = [
            route("ra", "a", "10.244.1.0/24"),
            route("rx", "x", "10.244.9.0/24"),
        ];
        let plan = plan(&routes, &[b], &cluster(), &no_busy());
        assert_eq!(
            deleted(&plan),
            vec![
                ("ra", DeleteReason::Unwanted),
                ("rx", DeleteReason::Unwanted)
            ]
        );
        assert!(plan.deletes[0].blocking);
        assert!(
            !plan.deletes[1].blocking,
            "unrelated deletes do not hold creates up"
        );
        assert!(plan.creates[0].creates[0].after_delete);
    }

    #[test]
    fn never_creates_a_destination_the_listing_still_has() {
        // The pod CIDR is outside the cluster CIDRs and another tool routes it elsewhere.
        let a = node("a", &["192.168.1.0/24"]);
        let routes = [route("foreign", "other", "192.168.1.0/24")];
        let plan = plan(&routes, &[a], &cluster(), &no_busy());
        assert!(plan.creates.is_empty());
        assert!(plan.deletes.is_empty());
        assert_eq!(plan.blocked.len(), 1);
        assert!(
            plan.blocked[0].why.contains("outside the cluster CIDRs"),
            "{}",
            plan.blocked[0].why
        );
        assert_eq!(plan.conditions, vec![("a".to_owned(), false)]);

        // Two Nodes claiming one pod CIDR: one create only.
        let plan = super::plan(
            &[],
            &[node("a", &["10.244.1.0/24"]), node("b", &["10.244.1.0/24"])],
            &HashSet::new(),
            &cluster(),
            &no_busy(),
        );
        assert_eq!(plan.create_count(), 1);
        assert_eq!(plan.blocked[0].node, "b");
        assert_eq!(plan.conditions, vec![("b".to_owned(), false)]);
    }

    #[test]
    fn a_blocked_cidr_keeps_the_node_unavailable_whatever_the_creates_do() {
        let a = node("a", &["192.168.1.0/24", "fd00:10:244:1::/64"]);
        let routes = [route("foreign", "other", "192.168.1.0/24")];
        let plan = plan(&routes, &[a], &cluster(), &no_busy());
        assert_eq!(plan.create_count(), 1);
        assert!(!plan.creates[0].others_routed);
    }

    #[test]
    fn nodes_with_routes_but_no_pod_cidr_are_unavailable() {
        let a = node("a", &[]);
        let untouched = node("quiet", &[]);
        let routes = [route("ra", "a", "10.244.1.0/24")];
        let plan = plan(&routes, &[a, untouched], &cluster(), &no_busy());
        assert_eq!(plan.conditions, vec![("a".to_owned(), false)]);
        assert_eq!(deleted(&plan), vec![("ra", DeleteReason::Unwanted)]);
    }

    #[test]
    fn nodes_with_neither_pod_cidrs_nor_routes_are_untouched() {
        let plan = plan(&[], &[node("quiet", &[])], &cluster(), &no_busy());
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn busy_destinations_are_left_alone() {
        let a = node("a", &["10.244.1.0/24", "fd00:10:244:1::/64"]);
        let b = node("b", &["10.244.2.0/24"]);
        let routes = [
            route("stale", "gone", "10.244.2.0/24"),
            route("other", "gone", "10.244.3.0/24"),
        ];
        let busy: HashSet<String> = ["10.244.1.0/24".to_owned(), "10.244.2.0/24".to_owned()].into();
        let plan = plan(&routes, &[a, b], &cluster(), &busy);
        // a's IPv4 create is still in flight: not again. Its IPv6 one is planned, but the
        // condition is left to whoever finishes.
        assert_eq!(
            created(&plan),
            vec![("uid-a".into(), "a".into(), "fd00:10:244:1::/64".into())]
        );
        assert!(plan.creates[0].pending);
        // b's destination is busy (a delete in flight): no create, no delete, no condition.
        assert_eq!(deleted(&plan), vec![("other", DeleteReason::Unwanted)]);
        assert!(plan.conditions.is_empty());
    }

    #[test]
    fn network_condition_is_written_only_when_status_or_reason_changes() {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let earlier = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let mut n = (*node("a", &["10.244.1.0/24"])).clone();

        let c = network_condition(&n, true, &now).unwrap();
        assert_eq!(c.type_, "NetworkUnavailable");
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some("RouteCreated"));
        assert_eq!(
            c.message.as_deref(),
            Some("RouteController created a route")
        );
        assert_eq!(c.last_transition_time, Some(now.clone()));

        let c = network_condition(&n, false, &now).unwrap();
        assert_eq!(c.status, "True");
        assert_eq!(c.reason.as_deref(), Some("NoRouteCreated"));

        let set = |n: &mut Node, status: &str, reason: &str| {
            n.status.as_mut().unwrap().conditions = Some(vec![NodeCondition {
                type_: "NetworkUnavailable".into(),
                status: status.into(),
                reason: Some(reason.into()),
                last_transition_time: Some(earlier.clone()),
                ..NodeCondition::default()
            }]);
        };
        set(&mut n, "False", "RouteCreated");
        assert_eq!(network_condition(&n, true, &now), None);
        assert!(network_condition(&n, false, &now).is_some());
        set(&mut n, "True", "NoRouteCreated");
        assert_eq!(network_condition(&n, false, &now), None);
        // Same status, another writer's reason: rewritten, but no transition.
        set(&mut n, "False", "CalicoIsUp");
        let c = network_condition(&n, true, &now).unwrap();
        assert_eq!(c.reason.as_deref(), Some("RouteCreated"));
        assert_eq!(c.last_transition_time, Some(earlier.clone()));
        set(&mut n, "True", "NoRouteCreated");
        let c = network_condition(&n, true, &now).unwrap();
        assert_eq!(c.last_transition_time, Some(now));
    }

    #[test]
    fn only_route_relevant_changes_trigger_a_reconcile() {
        let a = node("a", &["10.244.1.0/24"]);
        assert!(affects_routes(None, &a));
        assert!(!affects_routes(Some(&a), &a));
        let mut heartbeat = (*a).clone();
        heartbeat.metadata.resource_version = Some("2".into());
        heartbeat.status.as_mut().unwrap().conditions = Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..NodeCondition::default()
        }]);
        assert!(!affects_routes(Some(&a), &heartbeat));
        let mut recreated = (*a).clone();
        recreated.metadata.uid = Some("uid-2".into());
        assert!(affects_routes(Some(&a), &recreated));
        assert!(affects_routes(Some(&a), &node("a", &["10.244.2.0/24"])));
        let moved = with_addresses(&a, vec![node_address("InternalIP", "10.1.1.1")]);
        assert!(affects_routes(Some(&a), &moved));
        // A Node being initialised, before it has a pod CIDR: nothing to route yet.
        let bare = node("b", &[]);
        assert!(!affects_routes(None, &bare));
        let addressed = with_addresses(&bare, vec![node_address("InternalIP", "10.1.1.2")]);
        assert!(!affects_routes(Some(&bare), &addressed));
        assert!(affects_routes(Some(&bare), &node("b", &["10.244.3.0/24"])));
    }

    #[test]
    fn address_sets_compare_like_go() {
        let x = node_address("InternalIP", "10.0.0.1");
        let y = node_address("Hostname", "a");
        let both = [x.clone(), y.clone()];
        assert!(same_addresses(&both, &[y, x]));
        assert!(!same_addresses(&both[..1], &both));
        assert!(!same_addresses(&both[..1], &both[1..]));
        assert!(same_addresses(&[], &[]));
    }
}
