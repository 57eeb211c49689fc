//! The fake cloud's `--cloud-config` file: the instances it starts with and its modes.
//!
//! ```yaml
//! # Every Node name is an instance (for demos and benchmarks); default: false.
//! nodesAreInstances: true
//! defaults: { instanceType: fake-small, zone: zone-a, region: region-1 }
//! # Which instance interface to offer: "v2" (default) or "legacy" (v1 Instances + Zones).
//! instancesShape: v2
//! # Latency added to every call, in milliseconds (at most 60000).
//! latencyMs: 5
//! # Calls kept in the in-memory call log (at most 1000000); default 0: a controller manager
//! # cannot show it, so it would only grow. In-process tests build FakeCloud::new(), which
//! # keeps 100000.
//! callLogCapacity: 0
//! instances:
//!   - name: node-1
//!     id: i-0001            # default: the name; fake://<id> must be a valid provider ID
//!     instanceType: fake-large
//!     zone: zone-b
//!     region: region-1
//!     addresses:
//!       - { type: InternalIP, address: 10.0.0.11 }
//!     state: running        # or stopped
//!     labels: { example.com/pool: blue }
//! ```

use std::collections::BTreeMap;
use std::net::IpAddr;

use ccm_core::provider::{CloudConfig, ConfigError, ProviderId};
use serde::Deserialize;

use crate::PROVIDER_NAME;

/// The parsed cloud-config.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FakeCloudConfig {
    /// Every Node name is an instance, created on first sight with the defaults.
    #[serde(default)]
    pub nodes_are_instances: bool,
    /// Defaults for instances that do not say.
    #[serde(default)]
    pub defaults: InstanceDefaults,
    /// Which instance interface to offer.
    #[serde(default)]
    pub instances_shape: InstancesShape,
    /// Latency added to every call, in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// Calls kept in the call log (0: none; the per-method counters are always kept).
    #[serde(default)]
    pub call_log_capacity: usize,
    /// The instances the cloud starts with.
    #[serde(default)]
    pub instances: Vec<InstanceConfig>,
}

/// Instance defaults.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InstanceDefaults {
    /// The instance type.
    #[serde(default = "default_type")]
    pub instance_type: String,
    /// The zone.
    #[serde(default = "default_zone")]
    pub zone: String,
    /// The region.
    #[serde(default = "default_region")]
    pub region: String,
}

fn default_type() -> String {
    "fake-small".into()
}
fn default_zone() -> String {
    "zone-a".into()
}
fn default_region() -> String {
    "region-1".into()
}

impl Default for InstanceDefaults {
    fn default() -> Self {
        Self {
            instance_type: default_type(),
            zone: default_zone(),
            region: default_region(),
        }
    }
}

/// Which instance interface the fake cloud offers.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InstancesShape {
    /// `Instances` (Go's InstancesV2).
    #[default]
    V2,
    /// `LegacyInstances` plus `Zones` (Go's v1 Instances).
    Legacy,
}

/// One instance.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InstanceConfig {
    /// The name of the Node it backs.
    pub name: String,
    /// The cloud ID; default: the name.
    #[serde(default)]
    pub id: Option<String>,
    /// The instance type; default from `defaults`.
    #[serde(default)]
    pub instance_type: Option<String>,
    /// The zone; default from `defaults`.
    #[serde(default)]
    pub zone: Option<String>,
    /// The region; default from `defaults`.
    #[serde(default)]
    pub region: Option<String>,
    /// The addresses; default: an InternalIP the cloud assigns and a Hostname.
    #[serde(default)]
    pub addresses: Option<Vec<AddressConfig>>,
    /// Running or stopped.
    #[serde(default)]
    pub state: InstanceState,
    /// Additional labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// An instance address.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AddressConfig {
    /// `InternalIP`, `ExternalIP`, `Hostname`, `InternalDNS` or `ExternalDNS`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The address.
    pub address: String,
}

/// Whether an instance runs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    /// Running.
    #[default]
    Running,
    /// Stopped (shut down, but it still exists).
    Stopped,
}

const ADDRESS_TYPES: [&str; 5] = [
    "InternalIP",
    "ExternalIP",
    "Hostname",
    "InternalDNS",
    "ExternalDNS",
];

impl FakeCloudConfig {
    /// The largest `latencyMs`: a minute. A longer latency would only make every call time
    /// out.
    pub const MAX_LATENCY_MS: u64 = 60_000;

    /// The largest `callLogCapacity`: a million calls, some hundred megabytes at most.
    pub const MAX_CALL_LOG_CAPACITY: usize = 1_000_000;

    /// Parses and checks a cloud-config; errors name the file and the field.
    pub fn parse(config: &CloudConfig) -> Result<Self, ConfigError> {
        let parsed: Self = config.parse_yaml()?;
        if parsed.latency_ms > Self::MAX_LATENCY_MS {
            return Err(config.invalid(
                "latencyMs",
                format!(
                    "must be at most {}, got {}",
                    Self::MAX_LATENCY_MS,
                    parsed.latency_ms
                ),
            ));
        }
        if parsed.call_log_capacity > Self::MAX_CALL_LOG_CAPACITY {
            return Err(config.invalid(
                "callLogCapacity",
                format!(
                    "must be at most {}, got {}",
                    Self::MAX_CALL_LOG_CAPACITY,
                    parsed.call_log_capacity
                ),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        let mut ids = std::collections::BTreeSet::new();
        for (i, inst) in parsed.instances.iter().enumerate() {
            if inst.name.is_empty() {
                return Err(config.invalid(format!("instances[{i}].name"), "must not be empty"));
            }
            if !names.insert(inst.name.as_str()) {
                return Err(config.invalid(
                    format!("instances[{i}].name"),
                    format!("duplicate instance name {:?}", inst.name),
                ));
            }
            let id = inst.id.as_deref().unwrap_or(&inst.name);
            // The ID field at fault: `id`, or `name` when the ID defaults to it.
            let id_field = if inst.id.is_some() { "id" } else { "name" };
            if id.is_empty() {
                return Err(config.invalid(format!("instances[{i}].id"), "must not be empty"));
            }
            if let Err(e) = ProviderId::new(PROVIDER_NAME, id) {
                return Err(config.invalid(
                    format!("instances[{i}].{id_field}"),
                    format!("does not make a valid provider ID: {e}"),
                ));
            }
            if !ids.insert(id.to_owned()) {
                return Err(config.invalid(
                    format!("instances[{i}].id"),
                    format!("duplicate instance ID {id:?}"),
                ));
            }
            for (j, a) in inst.addresses.iter().flatten().enumerate() {
                let field = format!("instances[{i}].addresses[{j}]");
                if !ADDRESS_TYPES.contains(&a.type_.as_str()) {
                    return Err(config.invalid(
                        format!("{field}.type"),
                        format!(
                            "unknown address type {:?}; expected one of {}",
                            a.type_,
                            ADDRESS_TYPES.join(", ")
                        ),
                    ));
                }
                if a.type_.ends_with("IP") && a.address.parse::<IpAddr>().is_err() {
                    return Err(config.invalid(
                        format!("{field}.address"),
                        format!("{:?} is not an IP address", a.address),
                    ));
                }
            }
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<FakeCloudConfig, String> {
        FakeCloudConfig::parse(&CloudConfig::from_string("/etc/fake.yaml", s))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parses_the_documented_example() {
        let doc = include_str!("config.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! "))
            .skip_while(|l| !l.starts_with("```yaml"))
            .skip(1)
            .take_while(|l| !l.starts_with("```"))
            .collect::<Vec<_>>()
            .join("\n");
        let cfg = parse(&doc).unwrap();
        assert!(cfg.nodes_are_instances);
        assert_eq!(cfg.latency_ms, 5);
        assert_eq!(cfg.instances[0].id.as_deref(), Some("i-0001"));
        assert_eq!(cfg.instances[0].labels["example.com/pool"], "blue");
    }

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(parse("{}").unwrap(), FakeCloudConfig::default());
    }

    #[test]
    fn errors_name_the_field() {
        let err =
            parse("instances:\n- name: a\n  addresses: [{type: InternalIP, address: nope}]\n")
                .unwrap_err();
        assert_eq!(
            err,
            "invalid cloud-config file /etc/fake.yaml: field `instances[0].addresses[0].address`: \"nope\" is not an IP address"
        );
        let err = parse("instances:\n- name: a\n- name: a\n").unwrap_err();
        assert!(
            err.contains("field `instances[1].name`: duplicate instance name"),
            "{err}"
        );
        let err = parse("instances:\n- name: a\n  state: paused\n").unwrap_err();
        assert!(err.contains("field `instances[0].state`"), "{err}");
        let err = parse("instancesShape: v3\n").unwrap_err();
        assert!(err.contains("field `instancesShape`"), "{err}");
        let err = parse("latencyMs: -1\n").unwrap_err();
        assert!(err.contains("field `latencyMs`"), "{err}");
    }

    #[test]
    fn values_are_bounded() {
        assert_eq!(
            parse("latencyMs: 60001\n").unwrap_err(),
            "invalid cloud-config file /etc/fake.yaml: field `latencyMs`: must be at most 60000, got 60001"
        );
        assert!(parse("latencyMs: 60000\n").is_ok());
        assert_eq!(
            parse("callLogCapacity: 18446744073709551615\n").unwrap_err(),
            "invalid cloud-config file /etc/fake.yaml: field `callLogCapacity`: must be at most 1000000, got 18446744073709551615"
        );
        let err = parse("instances:\n- name: a\n  id: \"i 1\"\n").unwrap_err();
        assert!(
            err.contains("field `instances[0].id`: does not make a valid provider ID: provider ID \"fake://i 1\" has whitespace"),
            "{err}"
        );
        let err = parse("instances:\n- name: \"a\\tb\"\n").unwrap_err();
        assert!(
            err.contains("field `instances[0].name`: does not make a valid provider ID"),
            "{err}"
        );
    }
}
