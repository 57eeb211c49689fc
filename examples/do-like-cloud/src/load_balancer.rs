//! Load balancers.
//!
//! **Finding a Service's load balancer.** Once the provider has found or created a Service's
//! LB, it writes the LB's ID into [`ANNOTATION_LOAD_BALANCER_ID`] on the Service (through
//! ccm-core's [`ServiceAnnotator`](ccm_core::provider::ServiceAnnotator); before the LB is
//! active, so the ID is remembered even while the cloud provisions it). It looks the LB up,
//! in order:
//! 1. by the ID in [`ANNOTATION_LOAD_BALANCER_ID`]: one `GET`; a missing LB falls through
//!    to 2;
//! 2. by its deterministic name ([`default_load_balancer_name`]: `a` + the Service's UID, so
//!    nothing the user renames changes it) or the name the
//!    [`ANNOTATION_NAME`](crate::ANNOTATION_NAME) annotation gives it, among the LBs that are
//!    the Service's (below) — a paged list, needed only before the ID annotation is written.
//!
//! So a retried create after a lost answer finds the first LB instead of making a second, and
//! a rename neither leaks nor duplicates. A failed annotation write is logged and retried on
//! the next sync; it never fails the sync, since the name lookup still finds the LB.
//!
//! **Ownership before action.** Anyone who may edit Services in one namespace can write the
//! ID annotation, so the ID proves nothing. Every LB is created with two tags: the cluster's
//! ([`cluster_tag`]) and its Service's ([`owner_tag`]: `kubernetes-service-uid:<uid>`). An LB
//! found by ID is used only when it carries both (or, made before owner tags existed, the
//! cluster's tag and this Service's default name; the next ensure adds the owner tag).
//!
//! **Taking over from DigitalOcean's CCM.** Outside DOKS, DigitalOcean's CCM tags nothing,
//! so the load balancers it made carry no cluster tag. Such an LB — tagged for no cluster
//! (`k8s:` anything) and no Service — is this Service's when its name is the Service's
//! default name ([`default_load_balancer_name`], `a` + the UID without dashes, which is
//! DigitalOcean's CCM's name too unless `do-loadbalancer-name` is set): the UID is the
//! Service object's own, so no other Service can claim it by copying an annotation. The
//! first ensure keeps the LB (same ID, same address) and adds the two tags. An untagged LB
//! with another name (a custom `do-loadbalancer-name`) is refused like any other foreign
//! LB: the operator hands it over by tagging it (below). An LB tagged for another cluster
//! is refused; run ours with `--cluster-name` set to DigitalOcean's `DO_CLUSTER_ID` to keep
//! the LBs DigitalOcean's CCM tagged with it.
//! Otherwise — another Service's LB, another cluster's, or an annotation that is no LB ID
//! at all (not a UUID; never sent to the API) — ensure, update and get answer
//! [`CloudError::NotOwned`] and touch nothing, and deletion deletes only the Service's own LB
//! (found by name) and answers `NotOwned`, so the service controller lets the Service go
//! with a Warning. To hand an existing LB to a Service, tag it with the Service's
//! [`owner_tag`] in the cloud: ownership is granted where cluster users cannot write.
//!
//! **What is asked for** is what DigitalOcean's CCM asks for (`buildForwardingRules`,
//! `buildForwardingRule` and `buildHealthCheck` in `cloud-controller-manager/do/loadbalancers.go`):
//! one forwarding rule per Service port, to its node port. A TCP port's rule speaks the
//! [`ANNOTATION_PROTOCOL`](crate::ANNOTATION_PROTOCOL) protocol (`tcp` by default; TLS ports
//! `https`). A UDP port's rule is `udp` → `udp` whatever the annotations say, as DigitalOcean's
//! (supported since its v0.1.37; TCP and UDP may share a port number since v0.1.41). Any
//! other protocol (SCTP) is refused with an error naming the port, which the service
//! controller reports as a Warning Event: DigitalOcean's refuses it the same way ("only TCP
//! or UDP protocol is supported"). The health check is never UDP: by default it is HTTP
//! `/healthz` on the `healthCheckNodePort` (`externalTrafficPolicy: Local`) or on
//! kube-proxy's port 10256 (`Cluster`); see [`crate::annotations`] for it and its overrides.

mod health;
mod network_stack;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use ccm_core::provider::{
    CloudError, CloudResult, LoadBalancer, LoadBalancerHealth, LoadBalancerPlan,
    LoadBalancerSharing, ServiceAnnotator, default_load_balancer_name, load_balancer_group,
    node_name, node_provider_id,
};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service};

use crate::annotations::{
    ANNOTATION_LOAD_BALANCER_ID, ANNOTATION_NETWORK_STACK, LEGACY_ANNOTATION_LOAD_BALANCER_ID,
    LbSettings, disowned, read,
};
use crate::api::{
    ForwardingRule, LB_TYPE_REGIONAL, LB_TYPE_REGIONAL_NETWORK, LoadBalancerObject,
    LoadBalancerRequest, NETWORK_STACK_DUALSTACK, NETWORK_STACK_IPV4, SeenLoadBalancer,
};
use crate::{DoLikeCloud, cloud_error};

/// How long after a load balancer was first seen `new` it is looked at again.
const FIRST_ACTIVATION_LOOK: Duration = Duration::from_secs(1);
/// The longest wait between two looks at a load balancer that is still `new`.
const LONGEST_ACTIVATION_LOOK: Duration = Duration::from_secs(30);

/// How long until a load balancer still `new` at its last look is due for another look:
/// that look waits as long as the load balancer had been new then (at least
/// [`FIRST_ACTIVATION_LOOK`], at most [`LONGEST_ACTIVATION_LOOK`]), so the waits double: a
/// user waits at most about twice the activation, and an activation of length `T` costs
/// about `log2(T / 1 s)` reads. `None` when it was not new or the look is due now.
fn activation_due_in(seen: &SeenLoadBalancer, now: Instant) -> Option<Duration> {
    let since = seen.new_since?;
    let wait = seen
        .fetched
        .saturating_duration_since(since)
        .clamp(FIRST_ACTIVATION_LOOK, LONGEST_ACTIVATION_LOOK);
    (seen.fetched + wait)
        .checked_duration_since(now)
        .filter(|d| !d.is_zero())
}

/// The prefix of the owner tag ([`owner_tag`]).
const OWNER_TAG_PREFIX: &str = "kubernetes-service-uid:";
/// The prefix of every cluster's tag ([`cluster_tag`]), ours and DigitalOcean's CCM's
/// (`k8s:<DO_CLUSTER_ID>`).
const CLUSTER_TAG_PREFIX: &str = "k8s:";

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
    format!("{CLUSTER_TAG_PREFIX}{name}")
}

/// The tag naming the Service an LB was made for: `kubernetes-service-uid:<uid>`. Every LB
/// the provider creates carries it next to the [`cluster_tag`]; an LB found through the ID
/// annotation is used only if it carries this Service's.
pub fn owner_tag(service: &Service) -> String {
    format!(
        "{OWNER_TAG_PREFIX}{}",
        service.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// Whether `id` has the form of the cloud's LB IDs (a UUID): anything else names no LB of
/// ours and is not sent to the API.
fn is_lb_id(id: &str) -> bool {
    id.len() == 36
        && id.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// Why `lb` is not `service`'s in the cluster tagged `tag`, or `None` when it is.
fn not_ours(lb: &LoadBalancerObject, tag: &str, service: &Service) -> Option<&'static str> {
    let owner = owner_tag(service);
    let mut owners = lb
        .tags
        .iter()
        .filter(|t| t.starts_with(OWNER_TAG_PREFIX))
        .peekable();
    if !lb.tags.iter().any(|t| t == tag) {
        // Made by a CCM that tags nothing (DigitalOcean's, outside DOKS): the Service's
        // default name, `a` + its UID, is the proof that it was made for this Service, one a
        // copied annotation cannot give. The next ensure tags it for the cluster.
        let untagged =
            owners.peek().is_none() && !lb.tags.iter().any(|t| t.starts_with(CLUSTER_TAG_PREFIX));
        if untagged && lb.name == default_load_balancer_name(service) {
            return None;
        }
        return Some(if untagged {
            "it is tagged for no cluster and its name is not this Service's default name"
        } else {
            "it is not tagged for this cluster"
        });
    }
    if owners.peek().is_none() {
        // Made before owner tags: the name derived from the UID says whose it is.
        return (lb.name != default_load_balancer_name(service))
            .then_some("it has no owner tag and was made for another Service");
    }
    // Exactly this Service's: an LB two Services could claim is neither's.
    if owners.all(|t| *t == owner) {
        None
    } else {
        Some("it was made for another Service")
    }
}

/// The forwarding rule of TCP Service port `entry_port` (DigitalOcean's CCM's rules): TLS
/// ports are `https` (unless the protocol is `http2`); a TLS rule ends at the certificate
/// (target `http`) or passes TLS through (target as entry).
fn forwarding_rule(settings: &LbSettings, entry_port: u16, target_port: u16) -> ForwardingRule {
    let mut protocol = settings.protocol.clone();
    if settings.http_ports.contains(&entry_port) {
        protocol = "http".into();
    } else if settings.http2_ports.contains(&entry_port) {
        protocol = "http2".into();
    } else if settings.tls_ports.contains(&entry_port) && protocol != "http2" {
        protocol = "https".into();
    }
    let mut rule = ForwardingRule::new(&protocol, entry_port, target_port);
    if protocol == "https" || protocol == "http2" {
        if settings.tls_passthrough {
            rule.tls_passthrough = true;
        } else {
            rule.certificate_id = settings.certificate_id.clone();
            rule.target_protocol = "http".into();
        }
    }
    rule
}

/// The forwarding rule of a Service port with Kubernetes protocol `protocol` (`None` is
/// TCP): [`forwarding_rule`] for TCP, `udp` → `udp` for UDP (no annotation applies, as in
/// DigitalOcean's CCM); any other protocol is not forwarded, and the error says why.
fn port_rule(
    settings: &LbSettings,
    protocol: Option<&str>,
    entry_port: u16,
    target_port: u16,
) -> Result<ForwardingRule, String> {
    match protocol.unwrap_or("TCP") {
        "TCP" => Ok(forwarding_rule(settings, entry_port, target_port)),
        "UDP" => Ok(ForwardingRule::new("udp", entry_port, target_port)),
        other => Err(format!(
            "protocol {other} is not supported: load balancers forward TCP and UDP only"
        )),
    }
}

/// The passthrough form of `rule` (see `desired`): plain TCP or UDP, from and to the
/// Service's port, no TLS settings.
fn passthrough_rule(rule: &ForwardingRule, port: u16) -> ForwardingRule {
    let protocol = if rule.entry_protocol == "udp" {
        "udp"
    } else {
        "tcp"
    };
    ForwardingRule {
        x_passthrough: true,
        ..ForwardingRule::new(protocol, port, port)
    }
}

/// Whether `lb` is already as `desired` asks; see [`differences`].
fn up_to_date(lb: &LoadBalancerObject, desired: &LoadBalancerRequest) -> bool {
    differences(lb, desired).is_empty()
}

/// What an update of `lb` to `desired` would change, one `field: now → wanted` each:
/// compared on what the provider sets, as sets where order means nothing (rules, droplets,
/// tags), and ignoring what the API fills in that the provider leaves to it (a size not
/// asked for, the VPC).
fn differences(lb: &LoadBalancerObject, desired: &LoadBalancerRequest) -> Vec<String> {
    let mut changes = Vec::new();
    match (&desired.size, desired.size_unit) {
        (Some(slug), _) if lb.size.as_ref() != Some(slug) => {
            changes.push(format!("size: {:?} → {slug:?}", lb.size));
        }
        (None, Some(unit)) if lb.size_unit != Some(unit) => {
            changes.push(format!("size_unit: {:?} → {unit}", lb.size_unit));
        }
        _ => {}
    }
    let normal = |r: &LoadBalancerRequest| {
        let mut r = r.clone();
        r.size = None;
        r.size_unit = None;
        r.vpc_uuid = None;
        // An API that does not say has an IPv4 load balancer.
        r.network_stack
            .get_or_insert_with(|| NETWORK_STACK_IPV4.to_owned());
        r.forwarding_rules.sort();
        r.droplet_ids.sort_unstable();
        r.droplet_ids.dedup();
        r.tags.sort();
        r.tags.dedup();
        if let Some(h) = &mut r.health_check
            && h.protocol == "tcp"
        {
            h.path.clear();
        }
        serde_json::to_value(r).unwrap_or_default()
    };
    let (now, wanted) = (normal(&lb.to_request()), normal(desired));
    let field = |v: &serde_json::Value, k: &str| v.get(k).cloned().unwrap_or_default();
    let keys: BTreeSet<&String> = [&now, &wanted]
        .iter()
        .filter_map(|v| v.as_object())
        .flat_map(serde_json::Map::keys)
        .collect();
    for key in keys {
        let (a, b) = (field(&now, key), field(&wanted, key));
        if a != b {
            changes.push(format!("{key}: {a} → {b}"));
        }
    }
    changes
}

/// A Service's load balancer as the provider would make it, and whether its
/// `network_stack` is the provider's choice for a new one (the Service does not say), which
/// an existing load balancer's own replaces ([`network_stack`]).
struct Desired {
    request: LoadBalancerRequest,
    stack_unasked: bool,
}

impl Desired {
    /// The request for `found`, the Service's load balancer (`None`: a new one): the
    /// network stack it has when the Service does not ask for one, so that a load balancer
    /// made by DigitalOcean's CCM, or by ours before issue 66, keeps its stack.
    fn settled(mut self, found: Option<&LoadBalancerObject>) -> LoadBalancerRequest {
        if let (true, Some(lb)) = (self.stack_unasked, found) {
            let kept = network_stack::choose(None, Some(&lb.network_stack), false, false, &[]);
            self.request.network_stack = Some(kept.to_owned());
        }
        self.request
    }
}

fn service_key(service: &Service) -> String {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The Service's status for `lb`: its address, with `ipMode: Proxy` unless its rules are
/// passthrough. The load balancer proxies (the client's address does not reach the node), so
/// kube-proxy must not take the address on the nodes as its own (`VIP`, the default): Pods
/// that connect to it then go through the load balancer, its firewall and health checks,
/// like every other client (KEP-1860). A passthrough load balancer delivers packets still
/// addressed to it, which kube-proxy must take: `VIP`. DigitalOcean's CCM sets no `ipMode`;
/// docs/do-like-cloud.md says why we differ.
///
/// A dual-stack load balancer's IPv6 address (`ipv6`) follows its IPv4 one.
///
/// With a `hostname` ([`ANNOTATION_HOSTNAME`](crate::annotations::ANNOTATION_HOSTNAME)), the
/// ingress is that name instead, once the LB is active, as DigitalOcean's CCM writes it.
fn status(lb: &LoadBalancerObject, hostname: Option<String>) -> LoadBalancerStatus {
    let passthrough = lb.is_passthrough();
    LoadBalancerStatus {
        ingress: (!lb.ip.is_empty()).then(|| match hostname {
            Some(hostname) => vec![LoadBalancerIngress {
                hostname: Some(hostname),
                ..LoadBalancerIngress::default()
            }],
            // The IPv4 address first, then the IPv6 one when there is one (a dual-stack
            // load balancer), as DigitalOcean's CCM lists them.
            None => [&lb.ip, &lb.ipv6]
                .into_iter()
                .filter(|ip| !ip.is_empty())
                .map(|ip| LoadBalancerIngress {
                    ip: Some(ip.clone()),
                    ip_mode: Some(if passthrough { "VIP" } else { "Proxy" }.to_owned()),
                    ..LoadBalancerIngress::default()
                })
                .collect(),
        }),
    }
}

/// The hostname the Service asks for, if valid (an invalid one fails `desired`, which runs
/// first on every ensure).
fn hostname_of(service: &Service) -> Option<String> {
    crate::annotations::hostname(service).ok().flatten()
}

impl DoLikeCloud {
    /// This Service's LB in this cluster, if any (see the module docs): by the ID
    /// annotation, then by name. [`CloudError::NotOwned`] when the annotation leads to an LB
    /// that is not the Service's.
    async fn find_lb(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerObject>> {
        match self.by_annotation(cluster_name, service).await? {
            Some(lb) => Ok(Some(lb)),
            None => self.by_name(cluster_name, service).await,
        }
    }

    /// The LB the ID annotation names, if the annotation is set and the LB exists and is the
    /// Service's; [`CloudError::NotOwned`] if it exists and is not, or if the annotation
    /// holds no LB ID at all.
    async fn by_annotation(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerObject>> {
        // A group's Service carries its first member's annotations, not an ID of its own
        // (nothing is written on it): found by name.
        if load_balancer_group(service).is_some() {
            return Ok(None);
        }
        let Some((key, id)) =
            read(service, ANNOTATION_LOAD_BALANCER_ID).filter(|(_, i)| !i.is_empty())
        else {
            return Ok(None);
        };
        if !is_lb_id(id) {
            return Err(CloudError::not_owned(
                id,
                format!("annotation {key} does not hold a load balancer ID (a UUID)"),
            ));
        }
        // A load balancer still activating is answered from the client's last look until
        // the next look is due (a sync that the ID annotation's own write queued, say).
        let seen = self
            .client
            .seen_load_balancer(id)
            .filter(|seen| activation_due_in(seen, Instant::now()).is_some())
            .map(|seen| Arc::unwrap_or_clone(seen.lb));
        let lb = match seen {
            Some(lb) => lb,
            None => match self
                .client
                .load_balancer(id)
                .await
                .map_err(|e| cloud_error(&format!("getting load balancer {id}"), e))?
            {
                Some(lb) => lb,
                None => return Ok(None),
            },
        };
        match not_ours(&lb, &cluster_tag(cluster_name), service) {
            None => Ok(Some(lb)),
            Some(why) => Err(CloudError::not_owned(
                id,
                format!("annotation {key} names it, but {why}"),
            )),
        }
    }

    /// The LB named after the Service's UID among the cluster's, if it is the Service's.
    async fn by_name(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerObject>> {
        let tag = cluster_tag(cluster_name);
        // The name it is given, and the default one it had before a name was given (as
        // DigitalOcean's CCM's candidates); ownership is checked either way.
        let default = default_load_balancer_name(service);
        let custom = crate::annotations::lb_name(service).ok().flatten();
        let is_it = |lb: &LoadBalancerObject| {
            (lb.name == default || custom.as_deref() == Some(lb.name.as_str()))
                && not_ours(lb, &tag, service).is_none()
        };
        // The client's index of the account's load balancers: listed again only when its
        // list is older than the cache TTL, and kept current by every answer since (this
        // client's creates included), so a Service that has none costs no request.
        let all = self
            .client
            .cached_load_balancers()
            .await
            .map_err(|e| cloud_error("listing load balancers", e))?;
        let Some(found) = all.iter().find(|lb| is_it(lb)) else {
            return Ok(None);
        };
        // Found, but perhaps changed since the list: read it again, and check it again.
        let fresh = self
            .client
            .load_balancer(&found.id)
            .await
            .map_err(|e| cloud_error(&format!("getting load balancer {}", found.id), e))?;
        Ok(fresh.filter(is_it))
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
        for key in [
            ANNOTATION_LOAD_BALANCER_ID,
            LEGACY_ANNOTATION_LOAD_BALANCER_ID,
        ] {
            let present = service
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(key));
            if !present {
                continue;
            }
            if let Err(e) = annotator.remove(service, key).await {
                tracing::warn!(
                    service = %service_key(service),
                    annotation = key,
                    error = %ccm_core::provider::display_chain(&e),
                    "could not remove the load balancer ID annotation"
                );
            }
        }
    }

    /// What the Service's load balancer should be, as for a new one; see [`Desired`].
    async fn desired(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<Desired> {
        let settings = LbSettings::from_service(service)?;
        let ports = || service.spec.iter().flat_map(|s| s.ports.iter().flatten());
        // Without node ports (`allocateLoadBalancerNodePorts: false`) there is nothing to
        // proxy to: the load balancer forwards packets unchanged (the API's `x_passthrough`
        // extension) and kube-proxy takes them by the load balancer's address.
        // `REGIONAL_NETWORK` (DigitalOcean's network load balancers) is the same forwarding,
        // said as DigitalOcean's CCM says it: by the type, with plain rules.
        let network = settings.regional_network;
        let passthrough = network || ports().any(|p| p.node_port.unwrap_or_default() == 0);
        if settings.network_stack == Some(NETWORK_STACK_DUALSTACK) && passthrough {
            // `REGIONAL_NETWORK` with DUALSTACK is refused with the annotations; this is the
            // Service without node ports, whose passthrough rules carry IPv4 packets only.
            return Err(CloudError::msg(format!(
                "annotation {ANNOTATION_NETWORK_STACK}: DUALSTACK needs node ports: service {} \
                 has none (allocateLoadBalancerNodePorts: false), and its load balancer's \
                 passthrough rules carry IPv4 packets only",
                service_key(service)
            )));
        }
        let mut rules = Vec::new();
        for port in ports() {
            let protocol = port.protocol.as_deref();
            let entry_port = u16::try_from(port.port).unwrap_or(0);
            let node_port = u16::try_from(port.node_port.unwrap_or_default()).unwrap_or(0);
            // The protocol first: an SCTP port is refused whether or not it has a node port.
            let rule = port_rule(&settings, protocol, entry_port, node_port).map_err(|why| {
                CloudError::msg(format!(
                    "service {}: port {}/{}: {why}",
                    service_key(service),
                    port.port,
                    protocol.unwrap_or_default()
                ))
            })?;
            rules.push(if passthrough {
                ForwardingRule {
                    x_passthrough: !network,
                    ..passthrough_rule(&rule, entry_port)
                }
            } else {
                rule
            });
        }
        if rules.is_empty() {
            return Err(CloudError::msg(format!(
                "service {} has no ports",
                service_key(service)
            )));
        }
        let mut droplet_ids = BTreeSet::new();
        let mut by_name = Vec::new();
        for node in nodes {
            // Only a canonical droplet ID counts (`+100001` or `0100001` is not droplet
            // 100001); anything else is looked up by the Node's name.
            let pid = node_provider_id(node).and_then(|p| crate::instances::droplet_id(p).ok());
            match pid {
                Some(id) => {
                    droplet_ids.insert(id);
                }
                None => by_name.push(node_name(node)),
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
        // Chosen as DigitalOcean's CCM chooses it for a new load balancer; an existing one
        // keeps its own unless the Service says (`Desired::settled`).
        let stacks: Vec<_> = nodes.iter().map(|n| network_stack::node_stack(n)).collect();
        let proxy_without_node_ports = passthrough && !network;
        let stack_unasked = settings.network_stack.is_none() && !proxy_without_node_ports;
        let stack =
            network_stack::choose(settings.network_stack, None, passthrough, network, &stacks);
        let request = LoadBalancerRequest {
            name: settings
                .name
                .unwrap_or_else(|| default_load_balancer_name(service)),
            region: self.region.clone(),
            size: settings.size,
            size_unit: settings.size_unit,
            algorithm: Some(settings.algorithm),
            forwarding_rules: rules,
            health_check: Some(settings.health_check),
            sticky_sessions: Some(settings.sticky_sessions),
            droplet_ids: droplet_ids.into_iter().collect(),
            tag: None,
            tags: vec![cluster_tag(cluster_name), owner_tag(service)],
            redirect_http_to_https: settings.redirect_http_to_https,
            enable_proxy_protocol: settings.enable_proxy_protocol,
            vpc_uuid: None,
            firewall: settings.firewall,
            lb_type: Some(
                if network {
                    LB_TYPE_REGIONAL_NETWORK
                } else {
                    LB_TYPE_REGIONAL
                }
                .to_owned(),
            ),
            // Always said, as DigitalOcean's CCM says it.
            network_stack: Some(stack.to_owned()),
        };
        Ok(Desired {
            request,
            stack_unasked,
        })
    }
}

#[async_trait]
impl LoadBalancer for DoLikeCloud {
    /// Shared: one LB's forwarding rules can serve several Services, each port to its own
    /// `nodePort`. Members must agree on every annotation that configures the LB.
    fn load_balancer_sharing(&self) -> Option<LoadBalancerSharing> {
        Some(
            LoadBalancerSharing::new()
                .with_agreeing_annotations("service.beta.kubernetes.io/do-loadbalancer-")
                .with_agreeing_annotations("service.kubernetes.io/do-loadbalancer-")
                .with_agreeing_annotations("kubernetes.digitalocean.com/firewall-managed"),
        )
    }

    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        Ok(self
            .find_lb(cluster_name, service)
            .await?
            .map(|lb| status(&lb, hostname_of(service))))
    }

    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        if disowned(service)? {
            // Left alone: its status as it is, nothing written.
            let found = self.find_lb(cluster_name, service).await?;
            return Ok(found.map_or_else(LoadBalancerStatus::default, |lb| {
                status(&lb, hostname_of(service))
            }));
        }
        let desired = self.desired(cluster_name, service, nodes).await?;
        let found = self.find_lb(cluster_name, service).await?;
        let desired = desired.settled(found.as_ref());
        let lb = match found {
            Some(lb) if up_to_date(&lb, &desired) => lb,
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
        // ANCHOR: provisioning
        if lb.ip.is_empty() {
            let message = format!("load balancer {} is {}, not active yet", lb.id, lb.status);
            // Still activating: the Service comes back when the next look is due, not after
            // the controller's backoff; any other state (`errored`) backs off.
            return Err(match self.client.seen_load_balancer(&lb.id) {
                Some(seen) => match activation_due_in(&seen, Instant::now()) {
                    Some(due) => CloudError::provisioning(message, due),
                    None if seen.new_since.is_some() => {
                        CloudError::provisioning(message, FIRST_ACTIVATION_LOOK)
                    }
                    None => CloudError::msg(message),
                },
                None => CloudError::msg(message),
            });
        }
        // ANCHOR_END: provisioning
        Ok(status(&lb, hostname_of(service)))
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        if disowned(service)? {
            return Ok(());
        }
        let desired = self.desired(cluster_name, service, nodes).await?;
        let Some(lb) = self.find_lb(cluster_name, service).await? else {
            return Err(CloudError::msg(format!(
                "no load balancer for service {} to update",
                service_key(service)
            )));
        };
        self.remember_id(service, &lb).await;
        let desired = desired.settled(Some(&lb));
        if !up_to_date(&lb, &desired) {
            self.client
                .update_load_balancer(&lb.id, &desired)
                .await
                .map_err(|e| cloud_error(&format!("updating load balancer {}", lb.id), e))?;
        }
        Ok(())
    }

    async fn plan_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerPlan> {
        if disowned(service)? {
            let found = self.find_lb(cluster_name, service).await?;
            return Ok(LoadBalancerPlan::UpToDate(
                found.map_or_else(LoadBalancerStatus::default, |lb| {
                    status(&lb, hostname_of(service))
                }),
            ));
        }
        let desired = self.desired(cluster_name, service, nodes).await?;
        Ok(match self.find_lb(cluster_name, service).await? {
            None => LoadBalancerPlan::Create,
            Some(lb) => LoadBalancerPlan::update(
                status(&lb, hostname_of(service)),
                differences(&lb, &desired.settled(Some(&lb))),
            ),
        })
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()> {
        // Disowned: the LB stays, and so does the annotation naming it. A value that is no
        // boolean does not keep the Service from going: the LB is deleted as usual.
        if disowned(service).unwrap_or(false) {
            tracing::info!(service = %service_key(service), "load balancer disowned; left in place");
            return Ok(());
        }
        // An annotation that leads to an LB that is not the Service's does not stop the
        // deletion of the Service's own (found by name); it is reported, and left alone.
        let (own, foreign) = match self.by_annotation(cluster_name, service).await {
            Ok(Some(lb)) => (Some(lb), None),
            Ok(None) => (self.by_name(cluster_name, service).await?, None),
            Err(err) if err.is_not_owned() => {
                (self.by_name(cluster_name, service).await?, Some(err))
            }
            Err(err) => return Err(err),
        };
        if let Some(lb) = own {
            self.client
                .delete_load_balancer(&lb.id)
                .await
                .map_err(|e| cloud_error(&format!("deleting load balancer {}", lb.id), e))?;
            tracing::info!(service = %service_key(service), id = %lb.id, "load balancer deleted");
        }
        match foreign {
            // The annotation is someone's doing: it stays as they wrote it.
            Some(err) => Err(err),
            None => {
                self.forget_id(service).await;
                Ok(())
            }
        }
    }

    /// From the simulator's `x_droplet_health` extension, through the client's index (see
    /// docs/do-like-cloud.md, "Load balancer health"); `NotImplemented` against an API
    /// without the extension.
    async fn load_balancer_health(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<LoadBalancerHealth> {
        self.health(cluster_name, service).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HealthCheck, Region, StickySessions};

    #[test]
    fn cluster_tags() {
        assert_eq!(cluster_tag("kubernetes"), "k8s:kubernetes");
        assert_eq!(cluster_tag("a b/c"), "k8s:a-b-c");
    }

    fn svc(uid: &str) -> Service {
        let mut s = Service::default();
        s.metadata.uid = Some(uid.into());
        s
    }

    fn lb(name: &str, tags: &[&str]) -> LoadBalancerObject {
        LoadBalancerObject {
            id: "4de7ac8b-495b-4884-9a69-000000000001".into(),
            name: name.into(),
            ip: String::new(),
            ipv6: String::new(),
            size: None,
            size_unit: Some(1),
            status: "active".into(),
            created_at: "2026-01-02T03:04:05Z".into(),
            algorithm: "round_robin".into(),
            region: Region {
                slug: "nyc1".into(),
                ..Region::default()
            },
            forwarding_rules: Vec::new(),
            health_check: None,
            sticky_sessions: None,
            droplet_ids: Vec::new(),
            tag: String::new(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            redirect_http_to_https: false,
            enable_proxy_protocol: false,
            vpc_uuid: "c33931f2-a26a-4e61-b85c-4e95a2ec431b".into(),
            firewall: None,
            lb_type: LB_TYPE_REGIONAL.into(),
            network_stack: "IPV4".into(),
            x_droplet_health: None,
        }
    }

    #[test]
    fn an_untagged_lb_is_a_services_only_by_its_default_name() {
        let service = svc("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
        let default = default_load_balancer_name(&service);
        assert_eq!(default, "a0f1e2d3c4b5a69788796a5b4c3d2e1f");
        let tag = cluster_tag("c");
        // As DigitalOcean's CCM makes it outside DOKS: no tags at all.
        assert_eq!(not_ours(&lb(&default, &[]), &tag, &service), None);
        // Any other name: a custom name proves nothing, since it is copied as easily.
        assert_eq!(
            not_ours(&lb("my-lb", &[]), &tag, &service),
            Some("it is tagged for no cluster and its name is not this Service's default name")
        );
        // Another cluster's (ours or DigitalOcean's `k8s:<DO_CLUSTER_ID>`), or another
        // Service's, even with this Service's default name.
        for tags in [
            &["k8s:other"][..],
            &["k8s:2e4b1c5a-8f7d-4e3b-9a1c-0d2e3f4a5b6c"],
            &["kubernetes-service-uid:someone-else"],
        ] {
            assert_eq!(
                not_ours(&lb(&default, tags), &tag, &service),
                Some("it is not tagged for this cluster"),
                "{tags:?}"
            );
        }
        // Other tags (a user's own) do not make it a cluster's.
        assert_eq!(not_ours(&lb(&default, &["team:web"]), &tag, &service), None);
    }

    fn rule(entry: &str, port: u16, target: &str) -> ForwardingRule {
        ForwardingRule {
            target_protocol: target.into(),
            ..ForwardingRule::new(entry, port, 30000 + port)
        }
    }

    #[test]
    fn a_proxying_lb_is_ip_mode_proxy_and_a_passthrough_one_vip() {
        let mut proxied = lb("a1", &[]);
        assert_eq!(status(&proxied, None).ingress, None, "no address yet");
        proxied.ip = "10.88.64.1".into();
        proxied.forwarding_rules = vec![rule("tcp", 80, "tcp")];
        let ingress = status(&proxied, None).ingress.unwrap();
        assert_eq!(ingress[0].ip.as_deref(), Some("10.88.64.1"));
        assert_eq!(ingress[0].ip_mode.as_deref(), Some("Proxy"));
        let mut routed = proxied.clone();
        routed.forwarding_rules = vec![passthrough_rule(&rule("tcp", 80, "tcp"), 80)];
        assert_eq!(
            status(&routed, None).ingress.unwrap()[0].ip_mode.as_deref(),
            Some("VIP")
        );
    }

    #[test]
    fn a_dual_stack_lb_lists_its_ipv4_then_its_ipv6_address() {
        let mut dual = lb("a1", &[]);
        dual.network_stack = "DUALSTACK".into();
        dual.forwarding_rules = vec![rule("tcp", 80, "tcp")];
        dual.ipv6 = "fd00:77::1".into();
        assert_eq!(
            status(&dual, None).ingress,
            None,
            "not before the IPv4 address: the load balancer is not active"
        );
        dual.ip = "10.88.64.1".into();
        let ingress = status(&dual, None).ingress.unwrap();
        let ips: Vec<_> = ingress.iter().map(|i| i.ip.as_deref()).collect();
        assert_eq!(ips, [Some("10.88.64.1"), Some("fd00:77::1")]);
        assert!(
            ingress
                .iter()
                .all(|i| i.ip_mode.as_deref() == Some("Proxy"))
        );
        let named = status(&dual, Some("lb.example.com".into()))
            .ingress
            .unwrap();
        assert_eq!(named.len(), 1, "a hostname stands for both");
        dual.ipv6.clear();
        assert_eq!(status(&dual, None).ingress.unwrap().len(), 1, "IPv4 only");
    }

    #[test]
    fn a_network_stack_change_is_an_update_and_an_unsaid_one_is_ipv4() {
        let mut have = lb("a1", &[]);
        have.forwarding_rules = vec![rule("tcp", 80, "tcp")];
        let mut want = have.to_request();
        want.network_stack = Some("DUALSTACK".into());
        assert_eq!(
            differences(&have, &want),
            ["network_stack: \"IPV4\" → \"DUALSTACK\""]
        );
        want.network_stack = Some("IPV4".into());
        assert!(up_to_date(&have, &want));
        have.network_stack.clear();
        assert!(up_to_date(&have, &want), "an API that does not say: IPV4");
    }

    #[test]
    fn an_answer_is_up_to_date_when_what_the_provider_sets_matches() {
        let mut have = lb("a1", &["k8s:c", "kubernetes-service-uid:u"]);
        have.forwarding_rules = vec![rule("tcp", 443, "tcp"), rule("tcp", 80, "tcp")];
        have.droplet_ids = vec![2, 1];
        have.health_check = Some(HealthCheck {
            protocol: "tcp".into(),
            port: 30080,
            path: "/".into(),
            check_interval_seconds: 3,
            response_timeout_seconds: 5,
            healthy_threshold: 5,
            unhealthy_threshold: 3,
        });
        have.sticky_sessions = Some(StickySessions::default());
        let mut want = have.to_request();
        // The API's own choices (size, VPC) and orders mean nothing.
        want.size_unit = None;
        want.vpc_uuid = None;
        want.forwarding_rules.reverse();
        want.droplet_ids = vec![1, 2];
        want.tags.reverse();
        want.health_check.as_mut().unwrap().path.clear();
        assert!(up_to_date(&have, &want));
        // What the provider asks for counts.
        for change in [
            |w: &mut LoadBalancerRequest| w.size_unit = Some(2),
            |w: &mut LoadBalancerRequest| w.size = Some("lb-small".into()),
            |w: &mut LoadBalancerRequest| w.droplet_ids.push(3),
            |w: &mut LoadBalancerRequest| w.algorithm = Some("least_connections".into()),
            |w: &mut LoadBalancerRequest| w.enable_proxy_protocol = true,
            |w: &mut LoadBalancerRequest| w.forwarding_rules[0].certificate_id = "c".into(),
            |w: &mut LoadBalancerRequest| {
                w.health_check.as_mut().unwrap().check_interval_seconds = 10;
            },
        ] {
            let mut w = want.clone();
            change(&mut w);
            assert!(!up_to_date(&have, &w), "{w:?}");
        }
        // What differs is named, with both values.
        let mut w = want.clone();
        w.droplet_ids.push(3);
        w.enable_proxy_protocol = true;
        assert_eq!(
            differences(&have, &w),
            [
                "droplet_ids: [1,2] → [1,2,3]",
                "enable_proxy_protocol: false → true"
            ]
        );
    }

    #[test]
    fn http_and_http2_ports_speak_their_protocol() {
        let mut s = LbSettings::from_service(&Service::default()).unwrap();
        s.http_ports = vec![8080];
        s.http2_ports = vec![443];
        s.certificate_id = "cert".into();
        assert_eq!(forwarding_rule(&s, 8080, 38080), rule("http", 8080, "http"));
        assert_eq!(
            forwarding_rule(&s, 443, 30443),
            ForwardingRule {
                certificate_id: "cert".into(),
                ..rule("http2", 443, "http")
            }
        );
        assert_eq!(forwarding_rule(&s, 22, 30022), rule("tcp", 22, "tcp"));
    }

    #[test]
    fn tls_ports_end_at_the_certificate_or_pass_through() {
        let mut s = LbSettings::from_service(&Service::default()).unwrap();
        s.protocol = "http".into();
        s.tls_ports = vec![443];
        s.certificate_id = "cert".into();
        assert_eq!(forwarding_rule(&s, 80, 30080), rule("http", 80, "http"));
        assert_eq!(
            forwarding_rule(&s, 443, 30443),
            ForwardingRule {
                certificate_id: "cert".into(),
                ..rule("https", 443, "http")
            }
        );
        s.certificate_id.clear();
        s.tls_passthrough = true;
        assert_eq!(
            forwarding_rule(&s, 443, 30443),
            ForwardingRule {
                tls_passthrough: true,
                ..rule("https", 443, "https")
            }
        );
    }

    #[test]
    fn udp_ports_forward_udp_whatever_the_annotations_and_sctp_is_refused() {
        let mut s = LbSettings::from_service(&Service::default()).unwrap();
        s.protocol = "http".into();
        s.tls_ports = vec![443];
        s.certificate_id = "cert".into();
        // TCP and UDP on one Service, even on one port number (DNS).
        assert_eq!(
            port_rule(&s, Some("TCP"), 80, 30080),
            Ok(rule("http", 80, "http"))
        );
        assert_eq!(
            port_rule(&s, None, 80, 30080),
            Ok(rule("http", 80, "http")),
            "no protocol is TCP"
        );
        assert_eq!(
            port_rule(&s, Some("UDP"), 53, 30053),
            Ok(rule("udp", 53, "udp"))
        );
        assert_eq!(
            port_rule(&s, Some("UDP"), 443, 30443),
            Ok(rule("udp", 443, "udp")),
            "a UDP port in tls-ports is still plain UDP"
        );
        assert_eq!(
            port_rule(&s, Some("SCTP"), 9, 30009),
            Err("protocol SCTP is not supported: load balancers forward TCP and UDP only".into())
        );
    }

    #[test]
    fn looks_at_a_new_load_balancer_double_apart_from_one_second_to_thirty() {
        let t0 = Instant::now();
        let sec = Duration::from_secs(1);
        let seen = |new_for: Duration, status: &str| SeenLoadBalancer {
            lb: Arc::new(LoadBalancerObject {
                status: status.into(),
                ..lb("x", &[])
            }),
            fetched: t0 + new_for,
            new_since: (status == "new").then_some(t0),
            health: None,
        };
        // Just created: the first look a second later.
        assert_eq!(
            activation_due_in(&seen(Duration::ZERO, "new"), t0),
            Some(sec)
        );
        // Then each look waits as long as the load balancer had been new: 1, 2, 4 … 30 s.
        let looked = seen(3 * sec, "new");
        assert_eq!(activation_due_in(&looked, t0 + 3 * sec), Some(3 * sec));
        assert_eq!(activation_due_in(&looked, t0 + 5 * sec), Some(sec));
        assert_eq!(activation_due_in(&looked, t0 + 6 * sec), None, "due now");
        assert_eq!(
            activation_due_in(&seen(600 * sec, "new"), t0 + 600 * sec),
            Some(30 * sec)
        );
        assert_eq!(activation_due_in(&seen(sec, "active"), t0 + sec), None);
    }

    #[test]
    fn owner_tags_name_the_service_uid() {
        assert_eq!(
            owner_tag(&svc("6c9d2b0e-5f3a-4e0b-9a43-8f6b7c2d1e00")),
            "kubernetes-service-uid:6c9d2b0e-5f3a-4e0b-9a43-8f6b7c2d1e00"
        );
    }

    #[test]
    fn only_a_uuid_is_a_load_balancer_id() {
        assert!(is_lb_id("4de7ac8b-495b-4884-9a69-00000000002a"));
        assert!(is_lb_id("4DE7AC8B-495B-4884-9A69-00000000002A"));
        for bad in [
            "",
            "42",
            "4de7ac8b-495b-4884-9a69-00000000002",
            "4de7ac8b-495b-4884-9a69-00000000002a0",
            "4de7ac8b_495b-4884-9a69-00000000002a",
            "../../v2/droplets/1?x=4de7ac8b-495b-48",
            "4de7ac8b-495b-4884-9a69-00000000002é",
            &"a".repeat(100_000),
        ] {
            assert!(!is_lb_id(bad), "{bad:.40}");
        }
    }

    #[test]
    fn an_lb_is_the_services_only_with_the_cluster_tag_and_its_owner() {
        let me = svc("11111111-0000-0000-0000-000000000001");
        let mine = owner_tag(&me);
        let theirs = owner_tag(&svc("22222222-0000-0000-0000-000000000002"));
        let tag = "k8s:c1";
        let name = default_load_balancer_name(&me);
        assert_eq!(not_ours(&lb("any", &[tag, &mine]), tag, &me), None);
        assert_eq!(
            not_ours(&lb(&name, &[tag, &theirs]), tag, &me),
            Some("it was made for another Service"),
            "the owner tag wins over the name"
        );
        assert_eq!(
            not_ours(&lb("x", &["k8s:c2", &mine]), tag, &me),
            Some("it is not tagged for this cluster")
        );
        // Tagged for no cluster, not named after this Service (see the test below).
        assert_eq!(
            not_ours(&lb("x", &[]), tag, &me),
            Some("it is tagged for no cluster and its name is not this Service's default name")
        );
        // Made before owner tags: its name decides.
        assert_eq!(not_ours(&lb(&name, &[tag]), tag, &me), None);
        assert_eq!(
            not_ours(&lb("a2222", &[tag]), tag, &me),
            Some("it has no owner tag and was made for another Service")
        );
        // Two owners, one of them this Service: an LB two Services could claim is neither's.
        assert_eq!(
            not_ours(&lb("x", &[tag, &theirs, &mine]), tag, &me),
            Some("it was made for another Service")
        );
    }
}
