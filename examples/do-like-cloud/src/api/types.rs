//! The JSON bodies of the API: droplets, load balancers and the `/v2/x-routes` extension's
//! routes, as the client sends and reads them and the simulator serves them. Plain data with
//! public fields (not `#[non_exhaustive]`): both sides of the wire build them.

use serde::{Deserialize, Serialize};

/// A network of a droplet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Network {
    /// The address.
    pub ip_address: String,
    /// `public` or `private`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// A droplet's networks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Networks {
    /// IPv4 networks.
    #[serde(default)]
    pub v4: Vec<Network>,
    /// IPv6 networks.
    #[serde(default)]
    pub v6: Vec<Network>,
}

/// A region reference.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// The region's slug, e.g. `nyc1`.
    pub slug: String,
}

/// A droplet as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Droplet {
    /// The droplet's ID.
    pub id: u64,
    /// Its name (the node name).
    pub name: String,
    /// Its size, e.g. `s-2vcpu-4gb`.
    pub size_slug: String,
    /// Its region.
    pub region: Region,
    /// Its addresses.
    pub networks: Networks,
    /// `active` or `off`.
    pub status: String,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A forwarding rule of a load balancer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardingRule {
    /// `tcp`, `udp`, `http`, ...
    pub entry_protocol: String,
    /// The port clients connect to.
    pub entry_port: u16,
    /// The protocol towards droplets.
    pub target_protocol: String,
    /// The port on droplets (the node port).
    pub target_port: u16,
}

/// A load balancer's health check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    /// `tcp` or `http`.
    pub protocol: String,
    /// The port checked on droplets.
    pub port: u16,
    /// The path, for `http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// The writable part of a load balancer: the body of `POST` and `PUT`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadBalancerRequest {
    /// Its name.
    pub name: String,
    /// Its region slug.
    #[serde(default)]
    pub region: String,
    /// `lb-small`, `lb-medium` or `lb-large`.
    #[serde(default)]
    pub size: Option<String>,
    /// `round_robin` or `least_connections`.
    #[serde(default)]
    pub algorithm: Option<String>,
    /// Its forwarding rules; at least one.
    pub forwarding_rules: Vec<ForwardingRule>,
    /// Its health check.
    #[serde(default)]
    pub health_check: Option<HealthCheck>,
    /// The droplets behind it (or use `tag`).
    #[serde(default)]
    pub droplet_ids: Vec<u64>,
    /// Droplets with this tag are behind it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Its own tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A load balancer as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadBalancerObject {
    /// Its ID.
    pub id: String,
    /// Its public IP; empty until it is active.
    #[serde(default)]
    pub ip: String,
    /// `new` or `active`.
    pub status: String,
    /// Everything it was created or updated with.
    #[serde(flatten)]
    pub spec: LoadBalancerRequest,
}

/// A route of the `/v2/x-routes` extension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct XRoute {
    /// Its ID (ignored on create).
    #[serde(default)]
    pub id: u64,
    /// The destination CIDR.
    pub destination: String,
    /// The node name the traffic goes to.
    pub target: String,
    /// Its tags (the cluster tag).
    #[serde(default)]
    pub tags: Vec<String>,
}
