//! The checks, each named by the contract it verifies: [`Check`].
//!
//! A check's [`id`](Check::id) reads `<capability>.<contract>`, e.g.
//! `instances.exists_true_for_stopped`; the tests [`conformance_tests!`](crate::conformance_tests)
//! generates carry the same name with `::` (`conformance::instances::exists_true_for_stopped`).
//! Its [`contract`](Check::contract) is the sentence of the Go `k8s.io/cloud-provider`
//! contract it verifies, which the report prints next to a failure.

use std::fmt;
use std::str::FromStr;

macro_rules! checks {
    ($($variant:ident => $id:literal, $group:literal, $contract:literal;)*) => {
        /// One conformance check, named by the contract it verifies; [`Check::ALL`] lists them in
        /// the order a run goes through them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Check {
            $(
                #[doc = concat!("`", $id, "`: ", $contract)]
                $variant,
            )*
        }

        impl Check {
            /// Every check, in the order a run goes through them.
            pub const ALL: &'static [Check] = &[$(Check::$variant),*];

            /// The check's name, `<capability>.<contract>`.
            pub fn id(self) -> &'static str {
                match self { $(Check::$variant => $id,)* }
            }

            /// The capability it checks: `capabilities`, `instances`, `legacy_instances`,
            /// `load_balancer` or `routes`.
            pub fn group(self) -> &'static str {
                match self { $(Check::$variant => $group,)* }
            }

            /// The contract it verifies, in one or two sentences.
            pub fn contract(self) -> &'static str {
                match self { $(Check::$variant => $contract,)* }
            }
        }
    };
}

checks! {
    CapabilitiesNotImplementedReportedAsSuch => "capabilities.not_implemented_reported_as_such", "capabilities",
        "An unsupported capability is reported by returning None from its accessor (Go: `(nil, false)`), not by a capability whose every call fails; a call the provider cannot answer returns CloudError::NotImplemented, the kind the controllers branch on, not a Provider error that says so in words.";
    InstancesExistsTrueForRunning => "instances.exists_true_for_running", "instances",
        "instance_exists is Ok(true) for a running instance.";
    InstancesExistsTrueForStopped => "instances.exists_true_for_stopped", "instances",
        "A stopped instance exists: instance_exists must stay Ok(true), because Ok(false) makes the cloud-node-lifecycle controller delete the Node.";
    InstancesExistsFalseOnlyWhenGone => "instances.exists_false_only_when_gone", "instances",
        "Once the instance is gone, instance_exists returns Ok(false) (the Node is deleted), not an error (the Node would be skipped forever).";
    InstancesShutdownTrueWhenStopped => "instances.shutdown_true_when_stopped", "instances",
        "instance_shutdown is Ok(false) for a running instance and Ok(true) for a stopped one; it puts the node.cloudprovider.kubernetes.io/shutdown taint on and off.";
    InstancesMetadataProviderIdMatchesScheme => "instances.metadata_provider_id_matches_scheme", "instances",
        "instance_metadata answers for a running instance, with a provider_id of the form `<provider_name>://<id>` that parses as a ProviderId (or empty when the Node's spec.providerID is set, with which it must otherwise agree).";
    InstancesMetadataAddressesValid => "instances.metadata_addresses_valid", "instances",
        "instance_metadata's node_addresses have known types (InternalIP, ExternalIP, Hostname, InternalDNS, ExternalDNS); IP addresses parse as IPs and names are non-empty DNS names.";
    InstancesMetadataByProviderIdWhenNameDiffers => "instances.metadata_by_provider_id_when_name_differs", "instances",
        "instance_metadata checks spec.providerID first: a Node whose name is not the instance's still gets that instance's metadata.";
    LegacyInstancesInstanceIdNotFoundOnlyWhenGone => "legacy_instances.instance_id_not_found_only_when_gone", "legacy_instances",
        "LegacyInstances::instance_id returns InstanceNotFound only for a missing instance, not a stopped one; instance_exists_by_provider_id is true for a stopped instance and false for a gone one.";
    LoadBalancerGetFalseBeforeEnsure => "load_balancer.get_false_before_ensure", "load_balancer",
        "get_load_balancer says the load balancer exists only once ensure_load_balancer made it: None before, Some after, None again after ensure_load_balancer_deleted.";
    LoadBalancerEnsureIsIdempotent => "load_balancer.ensure_is_idempotent", "load_balancer",
        "ensure_load_balancer runs on every sync, so it is idempotent: called twice with the same arguments it leaves one load balancer and returns the same status, which get_load_balancer reports.";
    LoadBalancerUpdateWithNewNodes => "load_balancer.update_with_new_nodes", "load_balancer",
        "update_load_balancer points an existing load balancer at a new set of Nodes, adding and removing Nodes, and the load balancer keeps existing.";
    LoadBalancerEnsureDeletedIsIdempotent => "load_balancer.ensure_deleted_is_idempotent", "load_balancer",
        "ensure_load_balancer_deleted deletes the load balancer, and returns Ok when it is already gone; it never returns ImplementedElsewhere.";
    LoadBalancerEnsureDeletedWhenNothingExists => "load_balancer.ensure_deleted_when_nothing_exists", "load_balancer",
        "ensure_load_balancer_deleted returns Ok for a Service that never had a load balancer.";
    LoadBalancerStatusHasValidIngress => "load_balancer.status_has_valid_ingress", "load_balancer",
        "ensure_load_balancer returns a status with at least one ingress, each with a valid IP or a DNS hostname, and an ipMode, if any, of VIP or Proxy next to an IP.";
    LoadBalancerCopiedAnnotationsNeverTakeOver => "load_balancer.copied_annotations_never_take_over", "load_balancer",
        "A load balancer found through something a user can write on a Service (an ID annotation, a name) is used only if it belongs to that Service. Another Service carrying a copy of the first's annotations (in another namespace, in another cluster, or with each value made 100 kB long) never modifies or deletes the first's load balancer: ensure_load_balancer refuses with CloudError::NotOwned or makes the Service its own, get_load_balancer never reports the first's, and ensure_load_balancer_deleted returns Ok or NotOwned, never an error that holds the Service's finalizer.";
    RoutesCreateListDeleteRoundTrip => "routes.create_list_delete_round_trip", "routes",
        "A route made by create_route is listed by list_routes with its destination CIDR and target node, not as a blackhole, and delete_route removes it.";
    RoutesDeleteExactlyWhatListReturned => "routes.delete_exactly_what_list_returned", "routes",
        "delete_route, given a route as list_routes returned it, deletes exactly that route and leaves the others (here: another route to the same Node) as they were.";
    RoutesListScopedToCluster => "routes.list_scoped_to_cluster", "routes",
        "list_routes(cluster) lists only that cluster's routes, so one cluster's route controller never deletes another's.";
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// A string that is no check's [`id`](Check::id).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no conformance check is named {0:?}")]
pub struct UnknownCheck(pub String);

impl FromStr for Check {
    type Err = UnknownCheck;

    /// Parses a check's [`id`](Check::id).
    ///
    /// ```
    /// use ccm_conformance::Check;
    /// let check: Check = "routes.list_scoped_to_cluster".parse().unwrap();
    /// assert_eq!(check, Check::RoutesListScopedToCluster);
    /// assert!("routes.nope".parse::<Check>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Check::ALL
            .iter()
            .copied()
            .find(|c| c.id() == s)
            .ok_or_else(|| UnknownCheck(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_start_with_their_group() {
        let mut ids: Vec<&str> = Check::ALL.iter().map(|c| c.id()).collect();
        for check in Check::ALL {
            assert!(
                check.id().starts_with(&format!("{}.", check.group())),
                "{check}"
            );
            assert_eq!(check.id().parse::<Check>(), Ok(*check));
        }
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), Check::ALL.len());
    }
}
