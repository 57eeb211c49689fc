//! The conformance kit against the provider and the in-process simulator.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ccm_conformance::{Options, TestCloud, TestCloudError, TestCloudResult, UnderTest};
use ccm_core::provider::default_load_balancer_name;
use ccm_do_like_cloud::{
    ANNOTATION_LOAD_BALANCER_ID, ApiToken, Client, ClientOptions, DoLikeCloud, cluster_tag,
};
use ccm_do_like_simulator::{RunningSimulator, SimulatorConfig};
use ccm_test::fixtures::NodeBuilder;
use k8s_openapi::api::core::v1::{Node, Service};

const TOKEN: &str = "conformance-token";

/// Makes and breaks droplets through the simulator's admin handle; keeps the simulator alive.
struct SimTestCloud(RunningSimulator);

fn droplet_id(sim: &RunningSimulator, node: &Node) -> TestCloudResult<u64> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    sim.handle()
        .droplets()
        .iter()
        .find(|d| d.name == name)
        .map(|d| d.id)
        .ok_or_else(|| TestCloudError::msg(format!("no droplet named {name}")))
}

#[async_trait::async_trait]
impl TestCloud for SimTestCloud {
    async fn create_instance(&self, name: &str) -> TestCloudResult<Node> {
        self.0.handle().create_droplet(name, "s-1vcpu-1gb", "nyc1");
        Ok(NodeBuilder::new(name).build())
    }

    async fn delete_instance(&self, node: &Node) -> TestCloudResult<()> {
        let id = droplet_id(&self.0, node)?;
        self.0.handle().delete_droplet(id);
        Ok(())
    }

    async fn stop_instance(&self, node: &Node) -> TestCloudResult<()> {
        let id = droplet_id(&self.0, node)?;
        self.0.handle().set_droplet_status(id, "off");
        Ok(())
    }

    async fn start_instance(&self, node: &Node) -> TestCloudResult<()> {
        let id = droplet_id(&self.0, node)?;
        self.0.handle().set_droplet_status(id, "active");
        Ok(())
    }

    async fn list_load_balancers(&self, cluster_name: &str) -> TestCloudResult<Vec<String>> {
        let tag = cluster_tag(cluster_name);
        Ok(self
            .0
            .handle()
            .load_balancers()
            .into_iter()
            .filter(|lb| lb.tags.contains(&tag))
            .map(|lb| lb.name)
            .collect())
    }

    async fn load_balancer_nodes(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> TestCloudResult<Option<Vec<String>>> {
        let tag = cluster_tag(cluster_name);
        let name = default_load_balancer_name(service);
        let droplets = self.0.handle().droplets();
        Ok(self
            .0
            .handle()
            .load_balancers()
            .into_iter()
            .find(|lb| lb.name == name && lb.tags.contains(&tag))
            .map(|lb| {
                lb.droplet_ids
                    .iter()
                    .filter_map(|id| droplets.iter().find(|d| d.id == *id))
                    .map(|d| d.name.clone())
                    .collect()
            }))
    }

    /// The ID annotation the provider writes once the LB exists (outside a cluster it has no
    /// annotator, so the test cloud says what it would have written).
    async fn load_balancer_annotations(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> TestCloudResult<BTreeMap<String, String>> {
        let tag = cluster_tag(cluster_name);
        let name = default_load_balancer_name(service);
        Ok(self
            .0
            .handle()
            .load_balancers()
            .into_iter()
            .filter(|lb| lb.name == name && lb.tags.contains(&tag))
            .map(|lb| (ANNOTATION_LOAD_BALANCER_ID.to_owned(), lb.id))
            .collect())
    }
}

async fn provider_and_simulator() -> UnderTest {
    let mut cfg = SimulatorConfig::new(TOKEN);
    cfg.lb_activation_delay = Duration::ZERO;
    let sim = RunningSimulator::start(cfg).await.unwrap();
    let mut opts = ClientOptions::new(sim.url(), ApiToken::new(TOKEN));
    opts.requests_per_second = Some(1000.0);
    // The cache makes answers up to this stale; `settle_timeout` below allows for it.
    opts.cache_ttl = Duration::from_secs(1);
    let cloud = Arc::new(DoLikeCloud::new(Client::new(opts).unwrap(), "nyc1"));
    (cloud, Arc::new(SimTestCloud(sim)))
}

fn options() -> Options {
    Options::new("conformance")
        .with_settle_timeout(Duration::from_secs(5))
        .with_poll_interval(Duration::from_millis(200))
        .with_check_timeout(Duration::from_secs(60))
}

ccm_conformance::conformance_tests!(provider_and_simulator, options());
