//! Instances: droplets found by provider ID (`digitalocean://<id>`) or, for Nodes without
//! one yet, by name in the cached droplet list.

use std::sync::Arc;
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
/// Any age the cache allows: the cached list while it has not expired.
const CACHED: Duration = Duration::MAX;

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
            let id = droplet_id(pid).map_err(CloudError::msg)?;
            let list = self.droplet_list(CACHED).await?;
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
        let list = self.droplet_list(CACHED).await?;
        if let Some(d) = list.iter().find(|d| d.name == name) {
            return Ok(Some(d.clone()));
        }
        // A miss may be a droplet created since the list was taken: ask again unless the
        // list is very recent (so that lookups of names that do not exist stay cheap).
        let list = self.droplet_list(MISS_REFRESH_AGE).await?;
        Ok(list.iter().find(|d| d.name == name).cloned())
    }

    /// The droplets, from a list taken less than `max_age` ago (the cache's TTL at most):
    /// the cached list, or a new one.
    async fn droplet_list(&self, max_age: Duration) -> CloudResult<Arc<Vec<Droplet>>> {
        self.client
            .droplets_younger_than(max_age)
            .await
            .map_err(|e| cloud_error("listing droplets", e))
    }
}

/// The droplet ID of a provider ID `digitalocean://<id>`. Only the canonical spelling of a
/// number is accepted (decimal digits, no sign, no leading zero: the spelling
/// `instance_metadata` writes), so that two Nodes never name one droplet with two spellings
/// (`+100001`, `0100001`). The error says why, quoting at most the start of a long value.
pub(crate) fn droplet_id(provider_id: &str) -> Result<u64, String> {
    let pid = ProviderId::parse_for(PROVIDER_NAME, provider_id).map_err(|e| e.to_string())?;
    let digits = pid.id();
    let why = if !digits.bytes().all(|b| b.is_ascii_digit()) {
        "is not a decimal number"
    } else if digits.len() > 1 && digits.starts_with('0') {
        "has a leading zero"
    } else {
        match digits.parse::<u64>() {
            Ok(id) if id.to_string() == digits => return Ok(id),
            _ => "is out of range",
        }
    };
    let mut shown: String = digits.chars().take(32).collect();
    if shown.len() < digits.len() {
        shown.push_str("...");
    }
    Err(format!(
        "provider ID {PROVIDER_NAME}://{shown}: the droplet ID {why}; expected \
         {PROVIDER_NAME}://<droplet ID> in canonical decimal"
    ))
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
        let v4 = d.networks.v4.iter().map(|n| (&n.kind, &n.ip_address));
        let v6 = d.networks.v6.iter().map(|n| (&n.kind, &n.ip_address));
        for (kind, ip) in v4.chain(v6) {
            let kind = if kind == "private" {
                "InternalIP"
            } else {
                "ExternalIP"
            };
            meta = meta.with_address(node_address(kind, ip.clone()));
        }
        Ok(Some(meta))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::droplet_id;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every droplet ID has one spelling: what parses prints back exactly as given.
        #[test]
        fn one_spelling_a_droplet(s in prop_oneof![
            any::<String>(),
            "digitalocean://[-+ 0]{0,2}[0-9]{0,22}[ a-z/]{0,1}",
            any::<u64>().prop_map(|n| format!("digitalocean://{n}")),
        ]) {
            if let Ok(id) = droplet_id(&s) {
                prop_assert_eq!(format!("digitalocean://{id}"), s);
            }
        }

        /// Every number is a droplet ID in its canonical spelling, and in no other.
        #[test]
        fn every_number_reads_back(n in any::<u64>(), zeros in "0{1,3}", sign in "[+-]") {
            prop_assert_eq!(droplet_id(&format!("digitalocean://{n}")), Ok(n));
            for other in [format!("digitalocean://{zeros}{n}"), format!("digitalocean://{sign}{n}")] {
                prop_assert!(droplet_id(&other).is_err(), "{}", other);
            }
        }
    }

    #[test]
    fn droplet_ids_are_canonical() {
        assert_eq!(droplet_id("digitalocean://100001"), Ok(100_001));
        assert_eq!(droplet_id("digitalocean://0"), Ok(0));
        assert_eq!(
            droplet_id("digitalocean://18446744073709551615"),
            Ok(u64::MAX)
        );
        for (pid, why) in [
            ("digitalocean://+100001", "is not a decimal number"),
            ("digitalocean://-1", "is not a decimal number"),
            ("digitalocean://0100001", "has a leading zero"),
            ("digitalocean://00", "has a leading zero"),
            ("digitalocean://1e5", "is not a decimal number"),
            ("digitalocean:///100001", "is not a decimal number"),
            ("digitalocean://١٠", "is not a decimal number"),
            ("digitalocean://18446744073709551616", "is out of range"),
        ] {
            let err = droplet_id(pid).unwrap_err();
            assert!(
                err.contains(&format!("the droplet ID {why};")),
                "{pid}: {err}"
            );
        }
        // The generic parser's refusals come through, naming the input.
        for pid in [
            "digitalocean:// 100001",
            "digitalocean://100001\n",
            "fake://1",
            "100001",
        ] {
            let err = droplet_id(pid).unwrap_err();
            assert!(err.starts_with("provider ID "), "{pid:?}: {err}");
        }
        let err = droplet_id(&format!("digitalocean://{}", "9".repeat(100_000))).unwrap_err();
        assert!(err.len() < 200, "{err}");
    }
}
