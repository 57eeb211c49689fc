//! The fake cloud's load balancers.
//!
//! A load balancer is named after its Service's UID (`a` + the UID, Go's default name), or
//! after the [`ANNOTATION_LOAD_BALANCER_NAME`] hint when the Service carries one, as real
//! clouds let users name theirs. Each records the cluster and the UID of the Service it was
//! made for, and is used only for that Service: a hint that names another Service's (or
//! another cluster's) load balancer, or that is no valid name at all, gets
//! [`CloudError::NotOwned`] and changes nothing (see `ccm_core::provider::LoadBalancer`,
//! "Ownership before action"). Deletion removes every load balancer the Service owns in the
//! cluster, whatever its name, and leaves the others alone.

use std::hash::{Hash, Hasher};
use std::net::Ipv4Addr;
use std::sync::Arc;

use async_trait::async_trait;
use ccm_core::provider::{
    CloudError, CloudResult, LoadBalancer, LoadBalancerHealth, LoadBalancerSharing,
    default_load_balancer_name,
};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service};

use crate::{FakeCloud, Method, State};

/// The name of the Service's load balancer, instead of `a` + its UID: a name hint a user
/// writes, like the name annotations real clouds offer. 1 to 63 lowercase letters, digits
/// and `-`. The load balancer it names is used only if it was made for this Service; set it
/// before the first ensure (the fake cloud does not rename).
pub const ANNOTATION_LOAD_BALANCER_NAME: &str = "fake.example.com/load-balancer-name";

/// A load balancer of the fake cloud.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FakeLoadBalancer {
    /// The cloud name: the default name (`a` + the Service UID), or the Service's
    /// [`ANNOTATION_LOAD_BALANCER_NAME`].
    pub name: String,
    /// The cluster that created it; other clusters do not see it.
    pub cluster_name: String,
    /// The Service, `namespace/name`.
    pub service: String,
    /// The UID of the Service it was made for: its owner. Only that Service (in
    /// `cluster_name`) may change or delete it.
    pub service_uid: String,
    /// The ports, as `PROTOCOL:port->nodePort`.
    pub ports: Vec<String>,
    /// The names of the Nodes it sends traffic to, sorted. Load balancers given the same
    /// Nodes share one list, as a cloud would not copy it per load balancer either.
    pub nodes: Arc<Vec<String>>,
    /// A digest of its host set, Node name → provider ID (`spec.providerID`, empty when
    /// unset): what an update is compared by to count redundant ones. A digest rather than
    /// a list, so that load balancers given the Nodes at different moments of a churn do
    /// not each keep a copy of every provider ID (the fake cloud runs inside the benchmarked
    /// CCM, whose memory is measured).
    pub hosts_digest: u64,
    /// Its ingress IP.
    pub ingress_ip: String,
}

impl FakeLoadBalancer {
    fn status(&self) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                ip: Some(self.ingress_ip.clone()),
                ..LoadBalancerIngress::default()
            }]),
        }
    }
}

fn uid(service: &Service) -> &str {
    service.metadata.uid.as_deref().unwrap_or_default()
}

fn name_hint(service: &Service) -> Option<&str> {
    service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LOAD_BALANCER_NAME))
        .map(String::as_str)
}

fn valid_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The name of the Service's load balancer, and whether a user's hint chose it; a hint that
/// is no valid name names nothing of ours.
fn target(service: &Service) -> CloudResult<(String, bool)> {
    match name_hint(service) {
        None => Ok((default_load_balancer_name(service), false)),
        Some(name) if valid_name(name) => Ok((name.to_owned(), true)),
        Some(name) => Err(CloudError::not_owned(
            name,
            format!(
                "annotation {ANNOTATION_LOAD_BALANCER_NAME} is not a load balancer name (1 to 63 \
                 lowercase letters, digits and '-')"
            ),
        )),
    }
}

/// What the Service's name (default or hinted) leads to in `cluster_name`.
enum Lookup<'a> {
    /// Its own load balancer.
    Own(&'a FakeLoadBalancer),
    /// Nothing by that name.
    Missing,
    /// Another Service's or another cluster's, under the default name (not a hint: a UID
    /// collision, or the same Service seen from another cluster).
    TakenWithoutHint(&'a FakeLoadBalancer),
}

/// Looks up the Service's load balancer; a hint leading to one that is not the Service's is
/// [`CloudError::NotOwned`].
fn lookup<'a>(state: &'a State, cluster_name: &str, service: &Service) -> CloudResult<Lookup<'a>> {
    let (name, hinted) = target(service)?;
    let Some(lb) = state.load_balancers.get(&name) else {
        return Ok(Lookup::Missing);
    };
    if lb.cluster_name == cluster_name && lb.service_uid == uid(service) {
        return Ok(Lookup::Own(lb));
    }
    if !hinted {
        return Ok(Lookup::TakenWithoutHint(lb));
    }
    let whose = if lb.cluster_name == cluster_name {
        "it was made for another Service"
    } else {
        "it belongs to another cluster"
    };
    Err(CloudError::not_owned(
        name,
        format!("annotation {ANNOTATION_LOAD_BALANCER_NAME} names it, but {whose}"),
    ))
}

fn service_key(service: &Service) -> String {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    )
}

fn ports(service: &Service) -> Vec<String> {
    service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .map(|p| {
            format!(
                "{}:{}->{}",
                p.protocol.as_deref().unwrap_or("TCP"),
                p.port,
                p.node_port.unwrap_or_default()
            )
        })
        .collect()
}

/// A load balancer's host set: the sorted Node names (the list last stored when it is the
/// same, so that load balancers given the same Nodes share it and the state stays
/// O(Nodes), not O(LBs × Nodes)), and a digest of the names with their provider IDs
/// (`spec.providerID`, empty when unset).
fn hosts(state: &mut State, nodes: &[Arc<Node>]) -> (Arc<Vec<String>>, u64) {
    let mut pairs: Vec<(&str, &str)> = nodes
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.as_deref()?;
            let id = n
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .unwrap_or_default();
            Some((name, id))
        })
        .collect();
    pairs.sort_unstable();
    pairs.dedup_by(|a, b| a.0 == b.0);
    let mut digest = std::hash::DefaultHasher::new();
    pairs.hash(&mut digest);
    let names: Vec<String> = pairs.iter().map(|(n, _)| (*n).to_owned()).collect();
    let names = match &state.last_lb_nodes {
        Some(shared) if **shared == names => shared.clone(),
        _ => state.last_lb_nodes.insert(Arc::new(names)).clone(),
    };
    (names, digest.finish())
}

#[async_trait]
impl LoadBalancer for FakeCloud {
    fn load_balancer_sharing(&self) -> Option<LoadBalancerSharing> {
        let shares = !self.state.lock().no_sharing;
        shares.then(|| LoadBalancerSharing::new().with_agreeing_annotations("fake.example.com/"))
    }

    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        self.call(Method::GetLoadBalancer, &service_key(service))
            .await?;
        let state = self.state.lock();
        Ok(match lookup(&state, cluster_name, service)? {
            Lookup::Own(lb) => Some(lb.status()),
            Lookup::Missing | Lookup::TakenWithoutHint(_) => None,
        })
    }

    fn get_load_balancer_name(&self, _cluster_name: &str, service: &Service) -> String {
        target(service).map_or_else(|_| default_load_balancer_name(service), |(name, _)| name)
    }

    async fn load_balancer_health(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<LoadBalancerHealth> {
        self.call(Method::LoadBalancerHealth, &service_key(service))
            .await?;
        let state = self.state.lock();
        let Lookup::Own(lb) = lookup(&state, cluster_name, service)? else {
            return Ok(LoadBalancerHealth::degraded(
                "NotFound",
                "the cloud has no load balancer for the Service",
            ));
        };
        let healthy = lb
            .nodes
            .iter()
            .filter(|n| !state.unhealthy_nodes.contains(*n))
            .count();
        Ok(if lb.nodes.is_empty() {
            LoadBalancerHealth::degraded("NoBackends", "the load balancer has no Nodes")
        } else if healthy == 0 {
            LoadBalancerHealth::degraded(
                "NoHealthyBackends",
                format!("0 of {} Nodes pass the health check", lb.nodes.len()),
            )
        } else {
            LoadBalancerHealth::Healthy
        })
    }

    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        let key = service_key(service);
        self.call(Method::EnsureLoadBalancer, &key).await?;
        let ports = ports(service);
        if ports.is_empty() {
            return Err(CloudError::msg(format!(
                "service {key} has no ports: a load balancer needs at least one"
            )));
        }
        let (name, _) = target(service)?;
        let mut state = self.state.lock();
        let ingress_override = state.ingress_override.clone();
        let ingress_ip = match lookup(&state, cluster_name, service)? {
            Lookup::Own(lb) => lb.ingress_ip.clone(),
            Lookup::TakenWithoutHint(lb) => {
                let whose = if lb.cluster_name == cluster_name {
                    "it was made for another Service"
                } else {
                    "it belongs to another cluster"
                };
                return Err(CloudError::not_owned(
                    name,
                    format!("the Service's default name is taken: {whose}"),
                ));
            }
            Lookup::Missing => {
                state.next_ingress_ip += 1;
                Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + state.next_ingress_ip)
                    .to_string()
            }
        };
        let (nodes, hosts_digest) = hosts(&mut state, nodes);
        let lb = FakeLoadBalancer {
            name: name.clone(),
            cluster_name: cluster_name.to_owned(),
            service: key,
            service_uid: uid(service).to_owned(),
            ports,
            nodes,
            hosts_digest,
            ingress_ip,
        };
        let mut status = lb.status();
        state.load_balancers.insert(name, lb);
        self.load_balancers_changed(&state);
        if let Some(ip) = ingress_override {
            status.ingress = Some(vec![LoadBalancerIngress {
                ip: Some(ip),
                ..LoadBalancerIngress::default()
            }]);
        }
        Ok(status)
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        self.call(Method::UpdateLoadBalancer, &service_key(service))
            .await?;
        let mut state = self.state.lock();
        let state = &mut *state;
        let name = match lookup(state, cluster_name, service)? {
            Lookup::Own(lb) => lb.name.clone(),
            Lookup::Missing | Lookup::TakenWithoutHint(_) => {
                let (name, _) = target(service)?;
                return Err(CloudError::msg(format!("load balancer {name} not found")));
            }
        };
        let (nodes, hosts_digest) = hosts(state, nodes);
        if let Some(lb) = state.load_balancers.get_mut(&name) {
            // The same host set (names and provider IDs) as it has: the call changed
            // nothing. Both CCMs decide on this comparison, so it was not needed.
            if lb.hosts_digest == hosts_digest {
                state.redundant_load_balancer_updates += 1;
                if let Some(m) = self.metrics.get() {
                    m.redundant_load_balancer_update();
                }
            }
            lb.nodes = nodes;
            lb.hosts_digest = hosts_digest;
        }
        self.load_balancers_changed(state);
        Ok(())
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()> {
        self.call(Method::EnsureLoadBalancerDeleted, &service_key(service))
            .await?;
        let mut state = self.state.lock();
        // What the hint leads to, before anything changes: a load balancer that is not the
        // Service's is left alone and reported.
        let foreign = lookup(&state, cluster_name, service).err();
        // Every load balancer the Service owns in this cluster, whatever its name.
        let before = state.load_balancers.len();
        state
            .load_balancers
            .retain(|_, lb| !(lb.cluster_name == cluster_name && lb.service_uid == uid(service)));
        if state.load_balancers.len() != before {
            self.load_balancers_changed(&state);
        }
        foreign.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};

    use super::*;

    fn service(namespace: &str, uid: &str, port: i32, hint: Option<&str>) -> Service {
        let mut s = Service::default();
        s.metadata.namespace = Some(namespace.into());
        s.metadata.name = Some("web".into());
        s.metadata.uid = Some(uid.into());
        s.metadata.annotations = hint
            .map(|h| BTreeMap::from([(ANNOTATION_LOAD_BALANCER_NAME.to_owned(), h.to_owned())]));
        s.spec = Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort {
                port,
                node_port: Some(30000 + port),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        });
        s
    }

    fn node(name: &str) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        Arc::new(n)
    }

    fn node_with_id(name: &str, provider_id: &str) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            provider_id: Some(provider_id.into()),
            ..Default::default()
        });
        Arc::new(n)
    }

    #[tokio::test]
    async fn an_update_to_the_hosts_a_load_balancer_has_is_counted_as_redundant() {
        let cloud = FakeCloud::new();
        let registry = ccm_core::provider::MetricsRegistry::new();
        cloud
            .metrics
            .set(crate::metrics::CloudMetrics::register(&registry))
            .unwrap();
        // The counter, and the metric it is exported as.
        let assert_redundant = |n: u64| {
            assert_eq!(cloud.redundant_load_balancer_updates(), n);
            let metrics = registry.encode();
            let line = format!("fake_cloud_redundant_load_balancer_updates_total {n}\n");
            assert!(metrics.contains(&line), "{metrics}");
        };
        let svc = service("a", "uid-1", 80, None);
        let (n1, n2) = (node_with_id("n1", "fake://n1"), node("n2"));
        cloud
            .ensure_load_balancer("k", &svc, &[n1.clone(), n2.clone()])
            .await
            .unwrap();
        assert_redundant(0);

        // The same Nodes, in another order: the host set it has.
        cloud
            .update_load_balancer("k", &svc, &[n2.clone(), n1.clone()])
            .await
            .unwrap();
        assert_redundant(1);

        // The same names, but n2 got a provider ID: a change, not counted.
        let n2_with_id = node_with_id("n2", "fake://n2");
        cloud
            .update_load_balancer("k", &svc, &[n1.clone(), n2_with_id.clone()])
            .await
            .unwrap();
        assert_redundant(1);
        let lb = &cloud.load_balancers()[0];
        assert_eq!(*lb.nodes, ["n1", "n2"]);

        // A Node more: a change too.
        cloud
            .update_load_balancer("k", &svc, &[n1, n2_with_id, node("n3")])
            .await
            .unwrap();
        assert_redundant(1);
    }

    #[tokio::test]
    async fn load_balancers_given_the_same_hosts_share_their_lists() {
        let cloud = FakeCloud::new();
        let nodes = [node_with_id("n1", "fake://n1"), node("n2")];
        for uid in ["uid-1", "uid-2"] {
            cloud
                .ensure_load_balancer("k", &service("a", uid, 80, None), &nodes)
                .await
                .unwrap();
        }
        let lbs = cloud.load_balancers();
        assert!(Arc::ptr_eq(&lbs[0].nodes, &lbs[1].nodes));
        assert_eq!(lbs[0].hosts_digest, lbs[1].hosts_digest);
    }

    #[tokio::test]
    async fn a_hint_to_another_services_load_balancer_is_refused_and_never_touches_it() {
        let cloud = FakeCloud::new();
        let victim = service("tenant-a", "11111111-0000-0000-0000-000000000001", 80, None);
        cloud
            .ensure_load_balancer("k", &victim, &[node("n1")])
            .await
            .unwrap();
        let before = cloud.load_balancers();
        assert_eq!(before.len(), 1);
        assert_eq!(
            before[0].service_uid,
            "11111111-0000-0000-0000-000000000001"
        );
        let name = before[0].name.clone();

        // Another namespace, another UID, the victim's name as its hint, other ports and
        // Nodes: every call is refused, naming the conflict.
        let attacker = service(
            "tenant-b",
            "22222222-0000-0000-0000-000000000002",
            443,
            Some(&name),
        );
        let err = cloud
            .ensure_load_balancer("k", &attacker, &[node("n2")])
            .await
            .unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        assert_eq!(
            err.to_string(),
            format!(
                "load balancer {name:?} is not this Service's: annotation \
                 {ANNOTATION_LOAD_BALANCER_NAME} names it, but it was made for another Service"
            )
        );
        let err = cloud
            .update_load_balancer("k", &attacker, &[node("n2")])
            .await
            .unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        let err = cloud.get_load_balancer("k", &attacker).await.unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        assert_eq!(cloud.get_load_balancer_name("k", &attacker), name);
        // Deleting the attacker leaves the victim's; the answer says so.
        let err = cloud
            .ensure_load_balancer_deleted("k", &attacker)
            .await
            .unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        assert_eq!(
            cloud.load_balancers(),
            before,
            "nothing of the victim's changed"
        );

        // The victim's own calls still work.
        assert!(
            cloud
                .get_load_balancer("k", &victim)
                .await
                .unwrap()
                .is_some()
        );
        cloud
            .ensure_load_balancer_deleted("k", &victim)
            .await
            .unwrap();
        assert!(cloud.load_balancers().is_empty());
    }

    #[tokio::test]
    async fn a_hint_to_another_clusters_load_balancer_is_refused() {
        let cloud = FakeCloud::new();
        let victim = service("a", "uid-victim", 80, Some("shared-name"));
        cloud
            .ensure_load_balancer("one", &victim, &[])
            .await
            .unwrap();
        let copy = service("a", "uid-copy", 80, Some("shared-name"));
        for err in [
            cloud
                .ensure_load_balancer("two", &copy, &[])
                .await
                .unwrap_err(),
            cloud.get_load_balancer("two", &copy).await.unwrap_err(),
            cloud
                .ensure_load_balancer_deleted("two", &copy)
                .await
                .unwrap_err(),
        ] {
            assert!(
                err.to_string()
                    .ends_with("but it belongs to another cluster"),
                "{err}"
            );
        }
        // The same Service seen from another cluster, without a hint: nothing of its there.
        let plain = service("a", "uid-plain", 80, None);
        cloud
            .ensure_load_balancer("one", &plain, &[])
            .await
            .unwrap();
        assert_eq!(cloud.get_load_balancer("two", &plain).await.unwrap(), None);
        cloud
            .ensure_load_balancer_deleted("two", &plain)
            .await
            .unwrap();
        assert_eq!(cloud.load_balancers().len(), 2);
    }

    #[tokio::test]
    async fn a_hint_to_a_free_name_makes_the_services_own_load_balancer() {
        let cloud = FakeCloud::new();
        let svc = service("a", "uid-1", 80, Some("my-lb"));
        let status = cloud.ensure_load_balancer("k", &svc, &[]).await.unwrap();
        let lb = cloud.load_balancer("my-lb").unwrap();
        assert_eq!(lb.service_uid, "uid-1");
        assert_eq!(
            cloud.get_load_balancer("k", &svc).await.unwrap(),
            Some(status)
        );
        cloud
            .update_load_balancer("k", &svc, &[node("n1")])
            .await
            .unwrap();
        assert_eq!(*cloud.load_balancer("my-lb").unwrap().nodes, ["n1"]);
        cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
        assert!(cloud.load_balancers().is_empty());
    }

    #[tokio::test]
    async fn a_malformed_or_huge_hint_names_nothing_and_deletion_still_finishes() {
        let cloud = FakeCloud::new();
        let own = service("a", "uid-1", 80, None);
        cloud.ensure_load_balancer("k", &own, &[]).await.unwrap();
        for hint in ["Not_A_Name".to_owned(), String::new(), "x".repeat(100_000)] {
            let mut svc = own.clone();
            svc.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ANNOTATION_LOAD_BALANCER_NAME.into(), hint.clone());
            let err = cloud
                .ensure_load_balancer("k", &svc, &[])
                .await
                .unwrap_err();
            assert!(err.is_not_owned(), "{err}");
            assert!(
                err.to_string().len() < 400,
                "bounded: {} bytes",
                err.to_string().len()
            );
            assert!(
                err.to_string().contains("is not a load balancer name"),
                "{err}"
            );
            assert_eq!(cloud.load_balancers().len(), 1, "{hint:.20}");
        }
        // Deleted with a bad hint: the Service's own load balancer (found by its UID) goes,
        // and the answer says the hint led nowhere of ours.
        let mut svc = own.clone();
        svc.metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION_LOAD_BALANCER_NAME.to_owned(),
            "x".repeat(100_000),
        )]));
        let err = cloud
            .ensure_load_balancer_deleted("k", &svc)
            .await
            .unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        assert!(cloud.load_balancers().is_empty());
    }
}
