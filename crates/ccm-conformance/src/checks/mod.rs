//! The checks themselves, one async function per [`Check`], grouped by capability
//! (crate-private).
//!
//! Each function reads as the contract it verifies: it makes what it needs through the
//! [`Ctx`] (instances, Services, routes, all cleaned up by the runner), asks the provider, and
//! ends with a pass, or a [`Stop`](crate::context::Stop) naming what the provider answered.

mod capabilities;
mod instances;
mod load_balancer;
mod routes;

use crate::Check;
use crate::context::{Checked, Ctx};

/// Runs `check`.
pub(crate) async fn run(check: Check, ctx: &Ctx) -> Checked {
    match check {
        Check::CapabilitiesNotImplementedReportedAsSuch => {
            capabilities::not_implemented_reported_as_such(ctx).await
        }
        Check::InstancesExistsTrueForRunning => instances::exists_true_for_running(ctx).await,
        Check::InstancesExistsTrueForStopped => instances::exists_true_for_stopped(ctx).await,
        Check::InstancesExistsFalseOnlyWhenGone => {
            instances::exists_false_only_when_gone(ctx).await
        }
        Check::InstancesShutdownTrueWhenStopped => instances::shutdown_true_when_stopped(ctx).await,
        Check::InstancesMetadataProviderIdMatchesScheme => {
            instances::metadata_provider_id_matches_scheme(ctx).await
        }
        Check::InstancesMetadataAddressesValid => instances::metadata_addresses_valid(ctx).await,
        Check::InstancesMetadataByProviderIdWhenNameDiffers => {
            instances::metadata_by_provider_id_when_name_differs(ctx).await
        }
        Check::LegacyInstancesInstanceIdNotFoundOnlyWhenGone => {
            instances::legacy_instance_id_not_found_only_when_gone(ctx).await
        }
        Check::LoadBalancerGetFalseBeforeEnsure => {
            load_balancer::get_false_before_ensure(ctx).await
        }
        Check::LoadBalancerEnsureIsIdempotent => load_balancer::ensure_is_idempotent(ctx).await,
        Check::LoadBalancerUpdateWithNewNodes => load_balancer::update_with_new_nodes(ctx).await,
        Check::LoadBalancerEnsureDeletedIsIdempotent => {
            load_balancer::ensure_deleted_is_idempotent(ctx).await
        }
        Check::LoadBalancerEnsureDeletedWhenNothingExists => {
            load_balancer::ensure_deleted_when_nothing_exists(ctx).await
        }
        Check::LoadBalancerStatusHasValidIngress => {
            load_balancer::status_has_valid_ingress(ctx).await
        }
        Check::LoadBalancerCopiedAnnotationsNeverTakeOver => {
            load_balancer::copied_annotations_never_take_over(ctx).await
        }
        Check::RoutesCreateListDeleteRoundTrip => routes::create_list_delete_round_trip(ctx).await,
        Check::RoutesDeleteExactlyWhatListReturned => {
            routes::delete_exactly_what_list_returned(ctx).await
        }
        Check::RoutesListScopedToCluster => routes::list_scoped_to_cluster(ctx).await,
    }
}

/// Joins notes into one, or `None`.
fn notes(notes: Vec<String>) -> Option<String> {
    (!notes.is_empty()).then(|| notes.join("; "))
}
