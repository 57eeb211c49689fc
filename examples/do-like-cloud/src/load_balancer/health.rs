//! How a Service's load balancer serves (`LoadBalancer::load_balancer_health`), from the
//! simulator's `x_droplet_health` extension: each droplet behind the load balancer and how
//! it stands in the health check. DigitalOcean's API has no such field; against it the
//! provider answers [`CloudError::NotImplemented`] and the service controller stops asking.
//!
//! It is asked once a health period for every load balancer, so it reads the client's index
//! ([`crate::api::SeenLoadBalancer::health`]): the Service's load balancer as the last
//! answer about it said, when that is younger than the cache TTL (an ensure or a read keeps
//! it current), else the index after one list of the account's load balancers, which every
//! Service's health shares for a TTL (one list, not one read per Service). The ownership
//! rules of the module docs hold: a load balancer the ID annotation names that is not the
//! Service's is [`CloudError::NotOwned`], never a report about it.

use ccm_core::provider::{CloudError, CloudResult, LoadBalancerHealth, default_load_balancer_name};
use k8s_openapi::api::core::v1::Service;
use tokio::time::Instant;

use super::{cluster_tag, is_lb_id, not_ours};
use crate::annotations::{ANNOTATION_LOAD_BALANCER_ID, read};
use crate::api::{DropletHealthCount, SeenLoadBalancer};
use crate::{DoLikeCloud, cloud_error};

/// The health of a load balancer with status `status` whose droplets stand as `count` says:
///
/// - `errored` → `Degraded { LoadBalancerErrored }`;
/// - no droplets behind it → `Degraded { NoBackends }` (it serves nobody);
/// - at least one droplet passes → `Healthy`;
/// - none checked yet (the load balancer is not active, or no probe has answered) →
///   `Healthy`: nothing says otherwise, and `LoadBalancerServing` tells whether it serves;
/// - else (none passes) → `Degraded { NoHealthyBackends, "0 of N droplets pass the health
///   check" }`.
pub(crate) fn health(status: &str, count: DropletHealthCount) -> LoadBalancerHealth {
    if status == "errored" {
        return LoadBalancerHealth::degraded(
            "LoadBalancerErrored",
            "the cloud reports the load balancer errored",
        );
    }
    if count.droplets == 0 {
        return LoadBalancerHealth::degraded("NoBackends", "the load balancer has no droplets");
    }
    if count.healthy > 0 || count.checked == 0 {
        return LoadBalancerHealth::Healthy;
    }
    LoadBalancerHealth::degraded(
        "NoHealthyBackends",
        format!("0 of {} droplets pass the health check", count.droplets),
    )
}

impl DoLikeCloud {
    /// See the [module docs](self).
    pub(super) async fn health(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<LoadBalancerHealth> {
        let tag = cluster_tag(cluster_name);
        let annotated = read(service, ANNOTATION_LOAD_BALANCER_ID).filter(|(_, i)| !i.is_empty());
        if let Some((key, id)) = annotated
            && !is_lb_id(id)
        {
            return Err(CloudError::not_owned(
                id,
                format!("annotation {key} does not hold a load balancer ID (a UUID)"),
            ));
        }
        let ttl = self.client.options().cache_ttl;
        let recent = annotated
            .and_then(|(_, id)| self.client.seen_load_balancer(id))
            .filter(|seen| Instant::now().saturating_duration_since(seen.fetched) < ttl);
        let seen = match recent {
            Some(seen) => Some(seen),
            None => {
                self.seen_after_list(service, &tag, annotated.map(|(_, id)| id))
                    .await?
            }
        };
        let Some(seen) = seen else {
            return Ok(LoadBalancerHealth::degraded(
                "NotFound",
                "the cloud has no load balancer for the Service",
            ));
        };
        if let Some(why) = not_ours(&seen.lb, &tag, service) {
            let key = annotated.map_or(ANNOTATION_LOAD_BALANCER_ID, |(key, _)| key);
            return Err(CloudError::not_owned(
                &seen.lb.id,
                format!("annotation {key} names it, but {why}"),
            ));
        }
        let count = seen.health.ok_or(CloudError::NotImplemented)?;
        Ok(health(&seen.lb.status, count))
    }

    /// The Service's load balancer in the index once it holds a list younger than the TTL:
    /// the one with ID `id`, or without one the Service's by name (as `by_name` finds it).
    async fn seen_after_list(
        &self,
        service: &Service,
        tag: &str,
        id: Option<&str>,
    ) -> CloudResult<Option<SeenLoadBalancer>> {
        let all = self
            .client
            .cached_load_balancers()
            .await
            .map_err(|e| cloud_error("listing load balancers", e))?;
        let found = match id {
            Some(id) => all.iter().find(|lb| lb.id == id),
            None => {
                let default = default_load_balancer_name(service);
                let custom = crate::annotations::lb_name(service).ok().flatten();
                all.iter().find(|lb| {
                    (lb.name == default || custom.as_deref() == Some(lb.name.as_str()))
                        && not_ours(lb, tag, service).is_none()
                })
            }
        };
        Ok(found.and_then(|lb| self.client.seen_load_balancer(&lb.id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(droplets: usize, healthy: usize, checked: usize) -> DropletHealthCount {
        DropletHealthCount {
            droplets,
            healthy,
            checked,
        }
    }

    #[test]
    fn degraded_only_when_no_checked_droplet_passes() {
        assert_eq!(
            health("active", count(3, 1, 3)),
            LoadBalancerHealth::Healthy
        );
        assert_eq!(
            health("active", count(3, 0, 0)),
            LoadBalancerHealth::Healthy
        );
        assert_eq!(health("new", count(2, 0, 0)), LoadBalancerHealth::Healthy);
        assert_eq!(
            health("active", count(3, 0, 1)),
            LoadBalancerHealth::degraded(
                "NoHealthyBackends",
                "0 of 3 droplets pass the health check"
            )
        );
        assert_eq!(
            health("active", count(0, 0, 0)),
            LoadBalancerHealth::degraded("NoBackends", "the load balancer has no droplets")
        );
        assert!(matches!(
            health("errored", count(2, 2, 2)),
            LoadBalancerHealth::Degraded { reason, .. } if reason == "LoadBalancerErrored"
        ));
    }
}
