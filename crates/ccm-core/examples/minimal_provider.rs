//! The smallest useful provider: instances from a static table, configured by a
//! `--cloud-config` file, picked from a registry by name.
//!
//! ```sh
//! cargo run -p ccm-core --example minimal_provider
//! ```
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;

use ccm_core::k8s_openapi::api::core::v1::Node;
use ccm_core::provider::{
    BoxError, CloudConfig, CloudError, CloudProvider, CloudResult, InstanceMetadata, Instances,
    ProviderId, ProviderRegistry, display_chain, node_address, resolve_instances,
};
use serde::Deserialize;

/// The cloud-config: which machines exist.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    region: String,
    machines: BTreeMap<String, Machine>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Machine {
    ip: std::net::IpAddr,
    zone: String,
    #[serde(default)]
    stopped: bool,
}

struct TableCloud {
    config: Config,
}

impl TableCloud {
    const NAME: &'static str = "table";

    fn factory(config: Option<&CloudConfig>) -> Result<Arc<dyn CloudProvider>, BoxError> {
        let file = config.ok_or("the table provider needs --cloud-config")?;
        let config: Config = file.parse_yaml()?;
        if config.region.is_empty() {
            return Err(file.invalid("region", "must not be empty").into());
        }
        Ok(Arc::new(TableCloud { config }))
    }

    /// The machine behind a Node: by provider ID when the Node has one, else by name.
    fn machine(&self, node: &Node) -> CloudResult<Option<(&str, &Machine)>> {
        let name = match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
            Some(id) if !id.is_empty() => ProviderId::parse_for(Self::NAME, id)
                .map_err(|e| CloudError::provider("invalid provider ID", e))?
                .id()
                .to_owned(),
            _ => node.metadata.name.clone().unwrap_or_default(),
        };
        Ok(self
            .config
            .machines
            .get_key_value(&name)
            .map(|(k, m)| (k.as_str(), m)))
    }
}

// ANCHOR: readme
#[ccm_core::async_trait]
impl Instances for TableCloud {
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
        Ok(self.machine(node)?.is_some())
    }

    async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool> {
        let (_, m) = self.machine(node)?.ok_or(CloudError::InstanceNotFound)?;
        Ok(m.stopped)
    }

    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        let (name, m) = self.machine(node)?.ok_or(CloudError::InstanceNotFound)?;
        Ok(Some(
            InstanceMetadata::new(format!("{}://{name}", Self::NAME))
                .with_instance_type("standard")
                .with_zone(m.zone.clone(), self.config.region.clone())
                .with_address(node_address("InternalIP", m.ip.to_string())),
        ))
    }
}

impl CloudProvider for TableCloud {
    fn provider_name(&self) -> &str {
        Self::NAME
    }

    fn has_cluster_id(&self) -> bool {
        true
    }

    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }
}
// ANCHOR_END: readme

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let mut registry = ProviderRegistry::new();
    registry.register(TableCloud::NAME, TableCloud::factory)?;

    let dir = std::env::temp_dir().join(format!("minimal-provider-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("cloud.yaml");

    // A typo in the config is reported with the file and the field.
    std::fs::write(
        &path,
        "region: r1\nmachines:\n  web-1: {ip: 10.0.0.7, zone: z1, stoped: true}\n",
    )?;
    match registry.init(TableCloud::NAME, Some(&path)) {
        Err(e) => println!("bad config -> {}", display_chain(&e)),
        Ok(_) => unreachable!("the typo is caught"),
    }

    std::fs::write(
        &path,
        "region: r1\nmachines:\n  web-1: {ip: 10.0.0.7, zone: z1}\n",
    )?;
    let provider = registry.init(TableCloud::NAME, Some(&path))?;
    std::fs::remove_dir_all(&dir)?;

    let instances = resolve_instances(&provider).ok_or("no instances")?;
    let mut node = Node::default();
    node.metadata.name = Some("web-1".into());
    let meta = instances
        .instance_metadata(&node)
        .await?
        .ok_or("no metadata")?;
    println!(
        "web-1 -> providerID {}, zone {}, region {}, address {}",
        meta.provider_id, meta.zone, meta.region, meta.node_addresses[0].address
    );
    Ok(())
}
