//! DigitalOcean's v2 API, as a provider sees it: its wire types (the JSON bodies of
//! droplets, load balancers, errors and paging, and the simulator's routes extension) and [`Client`], the HTTP client that speaks it.
//!
//! The simulator (crate `ccm-do-like-simulator`) serves these same types; the provider
//! depends on nothing of it.

mod client;
mod lb_index;
mod types;

pub use self::client::{ApiError, ApiToken, CacheStats, Client, ClientOptions, RateWindow};
pub use self::lb_index::{DropletHealthCount, SeenLoadBalancer};
pub use self::types::{
    DROPLET_HEALTHY, DROPLET_UNHEALTHY, DROPLET_UNKNOWN, Droplet, DropletHealth, ErrorBody,
    ForwardingRule, HealthCheck, LB_TYPE_REGIONAL, LB_TYPE_REGIONAL_NETWORK, LbFirewall, Links,
    LoadBalancerObject, LoadBalancerRequest, Meta, NETWORK_STACK_DUALSTACK, NETWORK_STACK_IPV4,
    NetworkV4, NetworkV6, Networks, Pages, Region, Size, StickySessions, XRoute,
};
