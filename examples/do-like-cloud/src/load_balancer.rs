//! Load balancers.
//!
//! **Finding a Service's load balancer.** Once the provider has found or created a Service's
//! LB, it writes the LB's ID into [`ANNOTATION_LOAD_BALANCER_ID`] on the Service (through
//! ccm-core's [`ServiceAnnotator`](ccm_core::provider::ServiceAnnotator); before the LB is
//! active, so the ID is remembered even while the cloud provisions it). It looks the LB up,
//! in order:
//! 1. by the ID in [`ANNOTATION_LOAD_BALANCER_ID`]: one `GET`, whether it wrote the ID itself
//!    or a user set it to adopt an existing LB; a missing LB falls through to 2;
//! 2. by its deterministic name ([`default_load_balancer_name`]: `a` + the Service's UID, so
//!    nothing the user renames changes it) among the LBs tagged with the cluster's tag — a
//!    paged list, needed only before the annotation is written.
//!
//! So a retried create after a lost answer finds the first LB instead of making a second, and
//! a rename neither leaks nor duplicates. Only LBs carrying [`cluster_tag`] are ever updated
//! or deleted. A failed annotation write is logged and retried on the next sync; it never
//! fails the sync, since the name lookup still finds the LB.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ccm_core::provider::{
    CloudError, CloudResult, LoadBalancer, ProviderId, ServiceAnnotator, default_load_balancer_name,
};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service};

use crate::api::{ForwardingRule, HealthCheck, LoadBalancerObject, LoadBalancerRequest};
use crate::{DoLikeCloud, PROVIDER_NAME, cloud_error};

/// The LB's ID, used for lookup when present.
pub const ANNOTATION_LOAD_BALANCER_ID: &str = "do-like.example.com/load-balancer-id";
/// `tcp` (default), `http` or `http2`: the forwarding rules' protocol.
pub const ANNOTATION_PROTOCOL: &str = "do-like.example.com/load-balancer-protocol";
/// The health check's path (starts with `/`); makes the health check `http`.
pub const ANNOTATION_HEALTH_CHECK_PATH: &str = "do-like.example.com/load-balancer-healthcheck-path";
/// `round_robin` (default) or `least_connections`.
pub const ANNOTATION_ALGORITHM: &str = "do-like.example.com/load-balancer-algorithm";
/// `lb-small` (default), `lb-medium` or `lb-large`.
pub const ANNOTATION_SIZE: &str = "do-like.example.com/load-balancer-size";

/// The tag on every LB and route of a cluster: `k8s:<cluster name>` (characters DigitalOcean
/// does not allow in tags become `-`).
pub fn cluster_tag(cluster_name: &str) -> String {
    let name: String = cluster_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("k8s:{name}")
}

fn annotation<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(|v| v.trim())
}

fn one_of(service: &Service, key: &str, allowed: &[&str], default: &str) -> CloudResult<String> {
    match annotation(service, key) {
        None | Some("") => Ok(default.to_owned()),
        Some(v) if allowed.contains(&v) => Ok(v.to_owned()),
        Some(v) => Err(CloudError::msg(format!(
            "annotation {key}: invalid value {v:?}; allowed: {}",
            allowed.join(", ")
        ))),
    }
}

fn service_key(service: &Service) -> String {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    )
}

fn status(lb: &LoadBalancerObject) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: (!lb.ip.is_empty()).then(|| {
            vec![LoadBalancerIngress {
                ip: Some(lb.ip.clone()),
                ..LoadBalancerIngress::default()
            }]
        }),
    }
}

impl DoLikeCloud {
    /// This Service's LB in this cluster, if any (see the module docs).
    async fn find_lb(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerObject>> {
        let tag = cluster_tag(cluster_name);
        if let Some(id) = annotation(service, ANNOTATION_LOAD_BALANCER_ID).filter(|i| !i.is_empty())
            && let Some(lb) = self
                .client
                .load_balancer(id)
                .await
                .map_err(|e| cloud_error(&format!("getting load balancer {id}"), e))?
        {
            if !lb.spec.tags.contains(&tag) {
                return Err(CloudError::msg(format!(
                    "annotation {ANNOTATION_LOAD_BALANCER_ID}: load balancer {id} is not tagged \
                     {tag}; refusing to manage another cluster's load balancer"
                )));
            }
            return Ok(Some(lb));
        }
        let name = default_load_balancer_name(service);
        let all = self
            .client
            .list_load_balancers()
            .await
            .map_err(|e| cloud_error("listing load balancers", e))?;
        Ok(all
            .into_iter()
            .find(|lb| lb.spec.name == name && lb.spec.tags.contains(&tag)))
    }

    /// The annotator, when the provider has one and `service` is not being deleted (a
    /// Service on its way out keeps its annotations).
    fn annotator_for(&self, service: &Service) -> Option<&ServiceAnnotator> {
        self.annotator
            .get()
            .filter(|_| service.metadata.deletion_timestamp.is_none())
    }

    /// Writes `lb`'s ID onto the Service, if the provider was given an annotator and the
    /// Service does not already say so.
    async fn remember_id(&self, service: &Service, lb: &LoadBalancerObject) {
        let Some(annotator) = self.annotator_for(service) else {
            return;
        };
        if let Err(e) = annotator
            .set(service, ANNOTATION_LOAD_BALANCER_ID, &lb.id)
            .await
        {
            tracing::warn!(
                service = %service_key(service),
                id = %lb.id,
                error = %ccm_core::provider::display_chain(&e),
                "could not remember the load balancer's ID on the Service; retried on the next sync"
            );
        }
    }

    /// Removes the ID annotation from a Service that stays (its type changed away from
    /// `LoadBalancer`), so it does not name a deleted LB.
    async fn forget_id(&self, service: &Service) {
        let Some(annotator) = self.annotator_for(service) else {
            return;
        };
        if let Err(e) = annotator.remove(service, ANNOTATION_LOAD_BALANCER_ID).await {
            tracing::warn!(
                service = %service_key(service),
                error = %ccm_core::provider::display_chain(&e),
                "could not remove the load balancer ID annotation"
            );
        }
    }

    async fn desired(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerRequest> {
        let protocol = one_of(
            service,
            ANNOTATION_PROTOCOL,
            &["tcp", "http", "http2"],
            "tcp",
        )?;
        let algorithm = one_of(
            service,
            ANNOTATION_ALGORITHM,
            &["round_robin", "least_connections"],
            "round_robin",
        )?;
        let size = one_of(
            service,
            ANNOTATION_SIZE,
            &["lb-small", "lb-medium", "lb-large"],
            "lb-small",
        )?;
        let path = match annotation(service, ANNOTATION_HEALTH_CHECK_PATH) {
            None | Some("") => None,
            Some(p) if p.starts_with('/') && !p.contains(char::is_whitespace) => Some(p.to_owned()),
            Some(p) => {
                return Err(CloudError::msg(format!(
                    "annotation {ANNOTATION_HEALTH_CHECK_PATH}: invalid value {p:?}; a path \
                     starts with / and has no spaces"
                )));
            }
        };
        let mut rules = Vec::new();
        for port in service.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
            if port.protocol.as_deref().is_some_and(|p| p != "TCP") {
                return Err(CloudError::msg(format!(
                    "service {}: port {}: only TCP ports are supported",
                    service_key(service),
                    port.port
                )));
            }
            let node_port = u16::try_from(port.node_port.unwrap_or_default()).unwrap_or(0);
            if node_port == 0 {
                return Err(CloudError::msg(format!(
                    "service {}: port {} has no node port yet",
                    service_key(service),
                    port.port
                )));
            }
            rules.push(ForwardingRule {
                entry_protocol: protocol.clone(),
                entry_port: u16::try_from(port.port).unwrap_or(0),
                target_protocol: protocol.clone(),
                target_port: node_port,
            });
        }
        if rules.is_empty() {
            return Err(CloudError::msg(format!(
                "service {} has no ports",
                service_key(service)
            )));
        }
        let health_check = HealthCheck {
            protocol: if path.is_some() { "http" } else { "tcp" }.into(),
            port: rules[0].target_port,
            path,
        };
        let mut droplet_ids = BTreeSet::new();
        let mut by_name = Vec::new();
        for node in nodes {
            let pid = node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|p| ProviderId::parse_for(PROVIDER_NAME, p).ok())
                .and_then(|p| p.id().parse::<u64>().ok());
            match pid {
                Some(id) => {
                    droplet_ids.insert(id);
                }
                None => by_name.push(node.metadata.name.as_deref().unwrap_or_default()),
            }
        }
        if !by_name.is_empty() {
            // Nodes without a provider ID yet: by name, in the cached list first; a name
            // missing from it may be a droplet created since, so one fresh list settles it
            // (an update must not silently drop a new Node).
            let mut list = self
                .client
                .cached_droplets()
                .await
                .map_err(|e| cloud_error("listing droplets", e))?;
            if by_name.iter().any(|n| !list.iter().any(|d| d.name == *n)) {
                list = self
                    .client
                    .droplets_younger_than(Duration::ZERO)
                    .await
                    .map_err(|e| cloud_error("listing droplets", e))?;
            }
            for name in by_name {
                match list.iter().find(|d| d.name == name) {
                    Some(d) => {
                        droplet_ids.insert(d.id);
                    }
                    None => tracing::debug!(node = name, "no droplet for this Node; not a target"),
                }
            }
        }
        Ok(LoadBalancerRequest {
            name: default_load_balancer_name(service),
            region: self.region.clone(),
            size: Some(size),
            algorithm: Some(algorithm),
            forwarding_rules: rules,
            health_check: Some(health_check),
            droplet_ids: droplet_ids.into_iter().collect(),
            tag: None,
            tags: vec![cluster_tag(cluster_name)],
        })
    }
}

#[async_trait]
impl LoadBalancer for DoLikeCloud {
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        Ok(self
            .find_lb(cluster_name, service)
            .await?
            .map(|lb| status(&lb)))
    }

    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        let desired = self.desired(cluster_name, service, nodes).await?;
        let lb = match self.find_lb(cluster_name, service).await? {
            Some(lb) if lb.spec == desired => lb,
            Some(lb) => self
                .client
                .update_load_balancer(&lb.id, &desired)
                .await
                .map_err(|e| cloud_error(&format!("updating load balancer {}", lb.id), e))?,
            None => {
                let lb = self
                    .client
                    .create_load_balancer(&desired)
                    .await
                    .map_err(|e| cloud_error("creating the load balancer", e))?;
                tracing::info!(service = %service_key(service), id = %lb.id, "load balancer created");
                lb
            }
        };
        self.remember_id(service, &lb).await;
        if lb.ip.is_empty() {
            return Err(CloudError::retry_after(
                format!("load balancer {} is {}, not active yet", lb.id, lb.status),
                Duration::from_secs(2),
            ));
        }
        Ok(status(&lb))
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        let desired = self.desired(cluster_name, service, nodes).await?;
        let Some(lb) = self.find_lb(cluster_name, service).await? else {
            return Err(CloudError::msg(format!(
                "no load balancer for service {} to update",
                service_key(service)
            )));
        };
        self.remember_id(service, &lb).await;
        if lb.spec != desired {
            self.client
                .update_load_balancer(&lb.id, &desired)
                .await
                .map_err(|e| cloud_error(&format!("updating load balancer {}", lb.id), e))?;
        }
        Ok(())
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()> {
        if let Some(lb) = self.find_lb(cluster_name, service).await? {
            self.client
                .delete_load_balancer(&lb.id)
                .await
                .map_err(|e| cloud_error(&format!("deleting load balancer {}", lb.id), e))?;
            tracing::info!(service = %service_key(service), id = %lb.id, "load balancer deleted");
        }
        self.forget_id(service).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::cluster_tag;

    #[test]
    fn cluster_tags() {
        assert_eq!(cluster_tag("kubernetes"), "k8s:kubernetes");
        assert_eq!(cluster_tag("a b/c"), "k8s:a-b-c");
    }
}
