//! Instances: droplets found by provider ID (`digitalocean://<id>`) or, for Nodes without
//! one yet, by name in the cached droplet list.

use std::time::Duration;

use async_trait::async_trait;
use ccm_core::provider::{
    CloudError, CloudResult, InstanceMetadata, Instances, ProviderId, node_address,
};
use k8s_openapi::api::core::v1::Node;

use crate::api::Droplet;
use crate::{DoLikeCloud, PROVIDER_NAME, cloud_error};

/// A name missing from a cached list older than this lists again.
const MISS_REFRESH_AGE: Duration = Duration::from_secs(1);

impl DoLikeCloud {
    /// The droplet behind `node`: by provider ID when set (the cached list first, then one
    /// GET), else by name in the cached list.
    pub(crate) async fn find_droplet(&self, node: &Node) -> CloudResult<Option<Droplet>> {
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .filter(|p| !p.is_empty());
        if let Some(pid) = provider_id {
            let pid = ProviderId::parse_for(PROVIDER_NAME, pid)
                .map_err(|e| CloudError::provider("bad provider ID", e))?;
            let id: u64 = pid.id().parse().map_err(|_| {
                CloudError::msg(format!("provider ID {pid}: the droplet ID is not a number"))
            })?;
            let list = self
                .client
                .cached_droplets()
                .await
                .map_err(|e| cloud_error("listing droplets", e))?;
            if let Some(d) = list.iter().find(|d| d.id == id) {
                return Ok(Some(d.clone()));
            }
            return self
                .client
                .droplet(id)
                .await
                .map_err(|e| cloud_error(&format!("getting droplet {id}"), e));
        }
        let name = node.metadata.name.as_deref().unwrap_or_default();
        self.droplet_by_name(name).await
    }

    pub(crate) async fn droplet_by_name(&self, name: &str) -> CloudResult<Option<Droplet>> {
        let list = self
            .client
            .cached_droplets()
            .await
            .map_err(|e| cloud_error("listing droplets", e))?;
        if let Some(d) = list.iter().find(|d| d.name == name) {
            return Ok(Some(d.clone()));
        }
        // A miss may be a droplet created since the list was taken: ask again unless the
        // list is very recent (so that lookups of names that do not exist stay cheap).
        let list = self
            .client
            .droplets_younger_than(MISS_REFRESH_AGE)
            .await
            .map_err(|e| cloud_error("listing droplets", e))?;
        Ok(list.iter().find(|d| d.name == name).cloned())
    }
}

#[async_trait]
impl Instances for DoLikeCloud {
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
        Ok(self.find_droplet(node).await?.is_some())
    }

    async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool> {
        match self.find_droplet(node).await? {
            Some(d) => Ok(d.status == "off"),
            None => Err(CloudError::InstanceNotFound),
        }
    }

    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        let Some(d) = self.find_droplet(node).await? else {
            return Err(CloudError::InstanceNotFound);
        };
        let mut meta = InstanceMetadata::new(format!("{PROVIDER_NAME}://{}", d.id))
            .with_instance_type(d.size_slug.clone())
            // DigitalOcean has no zones below regions: the region is both.
            .with_zone(d.region.slug.clone(), d.region.slug.clone())
            .with_address(node_address("Hostname", d.name.clone()));
        for net in d.networks.v4.iter().chain(&d.networks.v6) {
            let kind = if net.kind == "private" {
                "InternalIP"
            } else {
                "ExternalIP"
            };
            meta = meta.with_address(node_address(kind, net.ip_address.clone()));
        }
        Ok(Some(meta))
    }
}
