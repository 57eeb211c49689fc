//! The JSON bodies of DigitalOcean's v2 API that the provider uses — droplets, load
//! balancers, regions, sizes, errors, paging — as DigitalOcean documents them, plus the
//! `/v2/x-routes` extension's routes (the simulator's own). The client reads them and the
//! simulator serves them. Plain data with public fields (not `#[non_exhaustive]`): both
//! sides of the wire build them.
//!
//! Reading is tolerant and strict where it matters: fields the API may add are ignored
//! (no `deny_unknown_fields`), and fields the provider does not rely on default when absent;
//! the fields it relies on (a droplet's `id`, `name`, `status`, `size_slug`, `region`,
//! `networks`; a load balancer's `id`, `name`, `status`, `region`, `forwarding_rules`) are
//! required, with their documented types (a load balancer's `region` is an object in an
//! answer and a slug in a request).

use serde::{Deserialize, Serialize};

/// A region, as answers embed it (`{"slug": "nyc1", "name": "New York 1", ...}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// The region's slug, e.g. `nyc1`.
    pub slug: String,
    /// Its display name, e.g. `New York 1`.
    #[serde(default)]
    pub name: String,
    /// The size slugs available in it.
    #[serde(default)]
    pub sizes: Vec<String>,
    /// Whether new resources can be created in it.
    #[serde(default)]
    pub available: bool,
    /// Its features, e.g. `private_networking`, `ipv6`.
    #[serde(default)]
    pub features: Vec<String>,
}

/// A droplet size, as a droplet embeds it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Size {
    /// The size's slug, e.g. `s-2vcpu-4gb`.
    pub slug: String,
    /// Memory in MiB.
    #[serde(default)]
    pub memory: u64,
    /// Virtual CPUs.
    #[serde(default)]
    pub vcpus: u32,
    /// Disk in GiB.
    #[serde(default)]
    pub disk: u64,
    /// Monthly transfer in TiB.
    #[serde(default)]
    pub transfer: f64,
    /// Monthly price in USD.
    #[serde(default)]
    pub price_monthly: f64,
    /// Hourly price in USD.
    #[serde(default)]
    pub price_hourly: f64,
    /// The region slugs it is offered in.
    #[serde(default)]
    pub regions: Vec<String>,
    /// Whether it can be created.
    #[serde(default)]
    pub available: bool,
    /// A description, e.g. `Basic`.
    #[serde(default)]
    pub description: String,
}

/// An IPv4 network of a droplet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkV4 {
    /// The address.
    pub ip_address: String,
    /// The netmask, dotted (`255.255.240.0`).
    #[serde(default)]
    pub netmask: String,
    /// The gateway.
    #[serde(default)]
    pub gateway: String,
    /// `public` or `private`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// An IPv6 network of a droplet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkV6 {
    /// The address.
    pub ip_address: String,
    /// The prefix length (a number, unlike IPv4's dotted netmask).
    #[serde(default)]
    pub netmask: u8,
    /// The gateway.
    #[serde(default)]
    pub gateway: String,
    /// `public`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// A droplet's networks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Networks {
    /// IPv4 networks.
    #[serde(default)]
    pub v4: Vec<NetworkV4>,
    /// IPv6 networks.
    #[serde(default)]
    pub v6: Vec<NetworkV6>,
}

/// A droplet as the API shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Droplet {
    /// The droplet's ID.
    pub id: u64,
    /// Its name (the node name).
    pub name: String,
    /// Memory in MiB.
    #[serde(default)]
    pub memory: u64,
    /// Virtual CPUs.
    #[serde(default)]
    pub vcpus: u32,
    /// Disk in GiB.
    #[serde(default)]
    pub disk: u64,
    /// Whether it is locked against actions.
    #[serde(default)]
    pub locked: bool,
    /// `new`, `active`, `off` or `archive`.
    pub status: String,
    /// When it was created (RFC 3339).
    #[serde(default)]
    pub created_at: String,
    /// Its features, e.g. `private_networking`.
    #[serde(default)]
    pub features: Vec<String>,
    /// Its size.
    #[serde(default)]
    pub size: Size,
    /// Its size's slug, e.g. `s-2vcpu-4gb` (the Node's instance type).
    pub size_slug: String,
    /// Its region (the Node's region and zone).
    pub region: Region,
    /// Its addresses.
    pub networks: Networks,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The VPC it is in.
    #[serde(default)]
    pub vpc_uuid: String,
}

/// A forwarding rule of a load balancer.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ForwardingRule {
    /// `tcp`, `udp`, `http`, `https`, `http2`, `http3`, `tls`.
    pub entry_protocol: String,
    /// The port clients connect to.
    pub entry_port: u16,
    /// The protocol towards droplets.
    pub target_protocol: String,
    /// The port on droplets (the node port).
    pub target_port: u16,
    /// The certificate terminating TLS (`https`/`http2` entry without passthrough); empty
    /// for none (the API answers `""`).
    #[serde(default)]
    pub certificate_id: String,
    /// Whether TLS is passed through to the droplets.
    #[serde(default)]
    pub tls_passthrough: bool,
    /// **An extension of the DO-like API** (DigitalOcean has none): the load balancer
    /// forwards packets unchanged — addressed to its own address and `entry_port` — to a
    /// healthy droplet, instead of proxying connections to the droplet's `target_port`
    /// (which must then equal `entry_port`). For a Service without node ports
    /// (`allocateLoadBalancerNodePorts: false`), whose traffic kube-proxy on the node takes
    /// by the load balancer's address; all rules of a load balancer are passthrough or none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub x_passthrough: bool,
}

impl ForwardingRule {
    /// A rule from `entry_port` to the droplets' `target_port` in one `protocol` (`tcp`,
    /// `udp`, `http`, …), with no TLS settings.
    pub fn new(protocol: &str, entry_port: u16, target_port: u16) -> Self {
        Self {
            entry_protocol: protocol.into(),
            entry_port,
            target_protocol: protocol.into(),
            target_port,
            ..Self::default()
        }
    }
}

/// A load balancer's health check.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    /// `tcp`, `http` or `https`.
    pub protocol: String,
    /// The port checked on droplets.
    pub port: u16,
    /// The path, for `http` and `https`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// Seconds between checks (3..=300).
    #[serde(default)]
    pub check_interval_seconds: u32,
    /// Seconds to wait for an answer (3..=300).
    #[serde(default)]
    pub response_timeout_seconds: u32,
    /// Passes before a droplet is healthy (2..=10).
    #[serde(default)]
    pub healthy_threshold: u32,
    /// Failures before a droplet is unhealthy (2..=10).
    #[serde(default)]
    pub unhealthy_threshold: u32,
}

/// A load balancer's sticky sessions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StickySessions {
    /// `none` or `cookies`; or `x_client_ip`, **an extension of the DO-like API**
    /// (DigitalOcean has none): each client address goes to one droplet (by a hash of the
    /// address over the healthy droplets), for Services with `sessionAffinity: ClientIP`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The cookie's name, for `cookies`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cookie_name: String,
    /// The cookie's lifetime in seconds, for `cookies`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cookie_ttl_seconds: u32,
}

impl Default for StickySessions {
    fn default() -> Self {
        Self {
            kind: "none".into(),
            cookie_name: String::new(),
            cookie_ttl_seconds: 0,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A load balancer's firewall: which client addresses may connect. Each rule is
/// `ip:<IPv4 address>` or `cidr:<IPv4 network>/<prefix length>`. With `allow` rules, only the
/// clients they match get through; a client a `deny` rule matches never does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LbFirewall {
    /// Sources allowed (all, when empty).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Sources denied.
    #[serde(default)]
    pub deny: Vec<String>,
}

impl LbFirewall {
    /// The source one rule names: `ip:<address>` is that address alone (prefix 32, or 128),
    /// `cidr:<network>/<len>` a network; the error says what is wrong.
    pub fn source(rule: &str) -> Result<(std::net::IpAddr, u8), String> {
        let bad = || format!("{rule:?} is not ip:<address> or cidr:<network>/<length>");
        let (ip, len) = match rule.strip_prefix("ip:") {
            Some(ip) => (ip, None),
            None => {
                let (ip, len) = rule
                    .strip_prefix("cidr:")
                    .and_then(|c| c.split_once('/'))
                    .ok_or_else(bad)?;
                (ip, Some(len.parse::<u8>().map_err(|_| bad())?))
            }
        };
        let ip: std::net::IpAddr = ip.parse().map_err(|_| bad())?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        match len.unwrap_or(max) {
            len if len <= max => Ok((ip, len)),
            _ => Err(bad()),
        }
    }
}

/// The writable part of a load balancer: the body of `POST` and `PUT`. Its `region` is a
/// slug (an answer's is an object).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadBalancerRequest {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its region's slug (required on create).
    #[serde(default)]
    pub region: String,
    /// `lb-small`, `lb-medium` or `lb-large` (or use `size_unit`, not both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Its number of nodes, 1..=100 (or use `size`, not both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_unit: Option<u32>,
    /// `round_robin` or `least_connections`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// Its forwarding rules; at least one.
    #[serde(default)]
    pub forwarding_rules: Vec<ForwardingRule>,
    /// Its health check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// Its sticky sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky_sessions: Option<StickySessions>,
    /// The droplets behind it (or use `tag`, not both).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub droplet_ids: Vec<u64>,
    /// Droplets with this tag are behind it (or use `droplet_ids`, not both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Its own tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Whether HTTP on port 80 is redirected to HTTPS on 443.
    #[serde(default)]
    pub redirect_http_to_https: bool,
    /// Whether the PROXY protocol is spoken to the droplets.
    #[serde(default)]
    pub enable_proxy_protocol: bool,
    /// The VPC it is in (the region's default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_uuid: Option<String>,
    /// Its firewall (none when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall: Option<LbFirewall>,
    /// `REGIONAL` (proxying: rules forward to the droplets' target ports) or
    /// `REGIONAL_NETWORK` (a network load balancer: packets reach the droplets unchanged,
    /// so each rule's target port is its entry port); `REGIONAL` when absent on create, the
    /// load balancer's own when absent on update.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub lb_type: Option<String>,
    /// [`NETWORK_STACK_IPV4`] (an IPv4 address only) or [`NETWORK_STACK_DUALSTACK`] (an
    /// IPv6 address too, `ipv6` in the answer); the load balancer's own when absent on
    /// update, `IPV4` when absent on create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_stack: Option<String>,
}

/// A load balancer as the API shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadBalancerObject {
    /// Its ID (a UUID).
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its public IPv4 address; empty until it is active.
    #[serde(default)]
    pub ip: String,
    /// Its IPv6 address: set once it is active when its `network_stack` is
    /// [`NETWORK_STACK_DUALSTACK`], empty otherwise.
    #[serde(default)]
    pub ipv6: String,
    /// Its size slug, when it was sized by slug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Its number of nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_unit: Option<u32>,
    /// `new`, `active` or `errored`.
    pub status: String,
    /// When it was created (RFC 3339).
    #[serde(default)]
    pub created_at: String,
    /// `round_robin` or `least_connections`.
    #[serde(default)]
    pub algorithm: String,
    /// Its region (an object).
    pub region: Region,
    /// Its forwarding rules.
    pub forwarding_rules: Vec<ForwardingRule>,
    /// Its health check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// Its sticky sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky_sessions: Option<StickySessions>,
    /// The droplets behind it.
    #[serde(default)]
    pub droplet_ids: Vec<u64>,
    /// The tag naming the droplets behind it (empty when `droplet_ids` is used).
    #[serde(default)]
    pub tag: String,
    /// Its own tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Whether HTTP on port 80 is redirected to HTTPS on 443.
    #[serde(default)]
    pub redirect_http_to_https: bool,
    /// Whether the PROXY protocol is spoken to the droplets.
    #[serde(default)]
    pub enable_proxy_protocol: bool,
    /// The VPC it is in.
    #[serde(default)]
    pub vpc_uuid: String,
    /// Its firewall, if it has rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall: Option<LbFirewall>,
    /// `REGIONAL` or `REGIONAL_NETWORK` (see [`LoadBalancerRequest::lb_type`]).
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub lb_type: String,
    /// [`NETWORK_STACK_IPV4`] or [`NETWORK_STACK_DUALSTACK`]; empty from an API that does
    /// not say (read as `IPV4`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network_stack: String,
    /// **An extension of the simulator's, not DigitalOcean's:** how each droplet behind it
    /// stands in its health check, as its data plane sees it. `None` from an API without
    /// the extension (DigitalOcean's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_droplet_health: Option<Vec<DropletHealth>>,
}

/// One droplet's standing in its load balancer's health check (the simulator's extension
/// [`LoadBalancerObject::x_droplet_health`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropletHealth {
    /// The droplet.
    pub droplet_id: u64,
    /// [`DROPLET_HEALTHY`], [`DROPLET_UNHEALTHY`] or [`DROPLET_UNKNOWN`] (not checked yet:
    /// the load balancer is not active, or no probe of the droplet has answered).
    pub status: String,
}

/// [`DropletHealth::status`] of a droplet that passes the health check (gets traffic).
pub const DROPLET_HEALTHY: &str = "healthy";
/// [`DropletHealth::status`] of a droplet that fails the health check.
pub const DROPLET_UNHEALTHY: &str = "unhealthy";
/// [`DropletHealth::status`] of a droplet not checked yet.
pub const DROPLET_UNKNOWN: &str = "unknown";

impl LoadBalancerObject {
    /// Whether it is a network load balancer: packets pass through to the droplets still
    /// addressed to it (`REGIONAL_NETWORK`, or rules with the `x_passthrough` extension).
    pub fn is_passthrough(&self) -> bool {
        self.lb_type == LB_TYPE_REGIONAL_NETWORK
            || (!self.forwarding_rules.is_empty()
                && self.forwarding_rules.iter().all(|r| r.x_passthrough))
    }
}

impl LoadBalancerObject {
    /// Whether it is dual-stack: its `network_stack` is [`NETWORK_STACK_DUALSTACK`].
    pub fn is_dual_stack(&self) -> bool {
        self.network_stack == NETWORK_STACK_DUALSTACK
    }
}

/// The network stack of a load balancer with an IPv4 address only, the default.
pub const NETWORK_STACK_IPV4: &str = "IPV4";
/// The network stack of a load balancer with an IPv4 and an IPv6 address.
pub const NETWORK_STACK_DUALSTACK: &str = "DUALSTACK";

/// The type of a proxying load balancer, the default.
pub const LB_TYPE_REGIONAL: &str = "REGIONAL";
/// The type of a network (passthrough) load balancer; DigitalOcean's CCM's default.
pub const LB_TYPE_REGIONAL_NETWORK: &str = "REGIONAL_NETWORK";

impl LoadBalancerObject {
    /// The request that would set this load balancer as it is (`region` as its slug), like
    /// godo's `AsRequest`: for updates that change one thing and keep the rest.
    pub fn to_request(&self) -> LoadBalancerRequest {
        LoadBalancerRequest {
            name: self.name.clone(),
            region: self.region.slug.clone(),
            size: self.size.clone(),
            size_unit: if self.size.is_some() {
                None
            } else {
                self.size_unit
            },
            algorithm: (!self.algorithm.is_empty()).then(|| self.algorithm.clone()),
            forwarding_rules: self.forwarding_rules.clone(),
            health_check: self.health_check.clone(),
            sticky_sessions: self.sticky_sessions.clone(),
            droplet_ids: self.droplet_ids.clone(),
            tag: (!self.tag.is_empty()).then(|| self.tag.clone()),
            tags: self.tags.clone(),
            redirect_http_to_https: self.redirect_http_to_https,
            enable_proxy_protocol: self.enable_proxy_protocol,
            vpc_uuid: (!self.vpc_uuid.is_empty()).then(|| self.vpc_uuid.clone()),
            firewall: self.firewall.clone(),
            lb_type: (!self.lb_type.is_empty()).then(|| self.lb_type.clone()),
            network_stack: (!self.network_stack.is_empty()).then(|| self.network_stack.clone()),
        }
    }
}

/// The body of an error answer: `{"id": "not_found", "message": "...", "request_id": "..."}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error's kind, e.g. `not_found`, `unprocessable_entity`, `too_many_requests`.
    #[serde(default)]
    pub id: String,
    /// What went wrong.
    #[serde(default)]
    pub message: String,
    /// The request's ID, for support.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
}

/// The page links of a list answer (absolute URLs; absent on the first or last page).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pages {
    /// The first page, from the second on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
    /// The previous page, from the second on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<String>,
    /// The next page, before the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// The last page, before the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
}

/// The `links` of a list answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Links {
    /// The page links (an empty object on a single page).
    #[serde(default)]
    pub pages: Pages,
}

/// The `meta` of a list answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// How many items all pages hold.
    pub total: u64,
}

/// A route of the `/v2/x-routes` extension (not DigitalOcean's: the simulator's own).
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
