//! The fake cloud's load balancers.

use std::net::Ipv4Addr;
use std::sync::Arc;

use async_trait::async_trait;
use ccm_core::provider::{CloudError, CloudResult, LoadBalancer};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service};

use crate::{FakeCloud, Method, lock};

/// A load balancer of the fake cloud.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FakeLoadBalancer {
    /// The cloud name (the default name: `a` + the Service UID).
    pub name: String,
    /// The cluster that created it; other clusters do not see it.
    pub cluster_name: String,
    /// The Service, `namespace/name`.
    pub service: String,
    /// The ports, as `PROTOCOL:port->nodePort`.
    pub ports: Vec<String>,
    /// The names of the Nodes it sends traffic to, sorted. Load balancers given the same
    /// Nodes share one list, as a cloud would not copy it per load balancer either.
    pub nodes: Arc<Vec<String>>,
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

/// The sorted names of `nodes`, as the list last stored when it is the same.
fn node_names(last: &mut Option<Arc<Vec<String>>>, nodes: &[Arc<Node>]) -> Arc<Vec<String>> {
    let mut names: Vec<String> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    names.sort();
    names.dedup();
    match last {
        Some(shared) if **shared == names => shared.clone(),
        _ => last.insert(Arc::new(names)).clone(),
    }
}

#[async_trait]
impl LoadBalancer for FakeCloud {
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        self.call(Method::GetLoadBalancer, &service_key(service))
            .await?;
        let name = self.get_load_balancer_name(cluster_name, service);
        let state = lock(&self.state);
        Ok(state
            .load_balancers
            .get(&name)
            .filter(|lb| lb.cluster_name == cluster_name)
            .map(FakeLoadBalancer::status))
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
        let name = self.get_load_balancer_name(cluster_name, service);
        let mut state = lock(&self.state);
        let ingress_override = state.ingress_override.clone();
        let ingress_ip = match state.load_balancers.get(&name) {
            Some(lb) if lb.cluster_name != cluster_name => {
                return Err(CloudError::msg(format!(
                    "load balancer {name} belongs to cluster {:?}",
                    lb.cluster_name
                )));
            }
            Some(lb) => lb.ingress_ip.clone(),
            None => {
                state.next_ingress_ip += 1;
                Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + state.next_ingress_ip)
                    .to_string()
            }
        };
        let lb = FakeLoadBalancer {
            name: name.clone(),
            cluster_name: cluster_name.to_owned(),
            service: key,
            ports,
            nodes: node_names(&mut state.last_lb_nodes, nodes),
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
        let name = self.get_load_balancer_name(cluster_name, service);
        let mut state = lock(&self.state);
        let state = &mut *state;
        match state
            .load_balancers
            .get_mut(&name)
            .filter(|lb| lb.cluster_name == cluster_name)
        {
            Some(lb) => {
                lb.nodes = node_names(&mut state.last_lb_nodes, nodes);
                self.load_balancers_changed(state);
                Ok(())
            }
            None => Err(CloudError::msg(format!("load balancer {name} not found"))),
        }
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()> {
        self.call(Method::EnsureLoadBalancerDeleted, &service_key(service))
            .await?;
        let name = self.get_load_balancer_name(cluster_name, service);
        let mut state = lock(&self.state);
        if state
            .load_balancers
            .get(&name)
            .is_some_and(|lb| lb.cluster_name == cluster_name)
        {
            state.load_balancers.remove(&name);
            self.load_balancers_changed(&state);
        }
        Ok(())
    }
}
