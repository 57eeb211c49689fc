//! The DigitalOcean-like API, as a provider sees it: its wire types (the JSON bodies of
//! droplets, load balancers and routes) and [`Client`], the HTTP client that speaks it.
//!
//! The simulator (crate `ccm-do-like-simulator`) serves these same types; the provider
//! depends on nothing of it.

mod client;
mod types;

pub use self::client::{ApiError, ApiToken, CacheStats, Client, ClientOptions};
pub use self::types::{
    Droplet, ForwardingRule, HealthCheck, LoadBalancerObject, LoadBalancerRequest, Network,
    Networks, Region, XRoute,
};
