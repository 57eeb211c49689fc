//! A simulator of DigitalOcean's v2 API, for tests, demos and the quickstart: in process
//! ([`RunningSimulator`]) or as the `do-like-api-simulator` binary. It serves the wire types
//! of `ccm_do_like_cloud::api`, in the shapes DigitalOcean documents (checked against the
//! same golden fixtures the provider parses, so the two cannot drift apart together).
//!
//! It serves, under `/v2`, with Bearer-token auth:
//!
//! | Route | What |
//! |---|---|
//! | `GET /v2/account` | the account of the token: active (DigitalOcean's CCM's health check) |
//! | `GET /v2/regions` | the regions of [`catalog::REGIONS`] (DigitalOcean's CCM checks its `REGION` here at start-up) |
//! | `GET/POST /v2/droplets`, `GET/DELETE /v2/droplets/{id}` | droplets (the list filtered by `tag_name` or exact `name`): `size` and `region` objects, `networks.v4`/`v6` with netmask and gateway, `vpc_uuid`, `created_at` |
//! | `GET/POST /v2/load_balancers`, `GET/PUT/DELETE /v2/load_balancers/{id}` | load balancers (`new` → `active` after a delay; the IPs are assigned on activation, `ipv6` only to a `network_stack: DUALSTACK` one); requests are checked as DigitalOcean does, a refusal is a 422 `unprocessable_entity`; each answer carries **an extension**, `x_droplet_health` (each droplet behind it `healthy`, `unhealthy` or `unknown`, as the data plane's checks left it) |
//! | `GET/POST /v2/x-routes`, `DELETE /v2/x-routes/{id}` | **an extension** (off with [`SimulatorConfig::routes_extension`]): DigitalOcean has no route tables (its VPCs route pod traffic through the CNI); the simulator adds one so that the route controller has something to drive; a route to a droplet that does not exist, or to a destination that is not a CIDR, is a 422 `unprocessable_entity`; with [`SimulatorConfig::kernel_routes`] the routes carry traffic (the module `route_table`) |
//!
//! Any other `/v2` path is DigitalOcean's 404. Lists are paged with `page` / `per_page`
//! (default 20, at most 200) and answer `links.pages` (`first`, `prev`, `next`, `last`, as
//! absolute URLs) and `meta.total`. Every `/v2` answer carries `ratelimit-limit`,
//! `ratelimit-remaining` and `ratelimit-reset`; past the limit it answers 429 with
//! `Retry-After`. Errors have DigitalOcean's shape, `{"id": "not_found", "message": "...",
//! "request_id": "..."}`, with the request ID also in `x-request-id`.
//!
//! Under `/admin` it creates (with a given private IPv4 and unique-local IPv6 address, for a
//! droplet standing for a test cluster's node), deletes, powers off and on droplets, injects faults ([`Faults`]:
//! an error rate, latency, bursts of 429, of 503 and of malformed JSON) and reports request
//! counts (`GET /admin/stats`). It needs no token unless
//! [`SimulatorConfig::admin_token`] is set; it is reachable from this machine only: the
//! simulator binds loopback addresses only, unless told to bind another
//! ([`SimulatorConfig::allow_non_loopback`], for a test network namespace), which needs an
//! admin token.
//!
//! A web page open in a browser on the same machine could still send it requests, so every
//! request (`/v2` and `/admin`) is refused with 403 when its `Host` is not a loopback address
//! or `localhost` with the simulator's port (DNS rebinding), when it has an `Origin` other
//! than the simulator's own (`http://` + such a host), or when its `Sec-Fetch-Site` says
//! another site sent it.
//!
//! State is kept in a JSON file, written atomically (a temporary file, then a rename), when
//! [`SimulatorConfig::state_file`] is set.
#![forbid(unsafe_code)]

pub mod catalog;
mod data_plane;
mod handlers;
mod http;
mod route_table;
mod validate;

pub use data_plane::{AddressRange, AddressRangeV6};

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use ccm_do_like_cloud::api::{
    Droplet, ErrorBody, HealthCheck, Links, LoadBalancerObject, LoadBalancerRequest, Meta,
    NetworkV4, NetworkV6, Networks, Pages, Region, Size, XRoute,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How a simulator runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SimulatorConfig {
    /// The address to bind; a loopback address unless
    /// [`allow_non_loopback`](Self::allow_non_loopback). Port 0 picks a free port.
    pub listen: SocketAddr,
    /// Whether [`listen`](Self::listen) may be another address than loopback: for a
    /// simulator inside a test's own network namespace, reached by a cluster's nodes. Needs
    /// [`admin_token`](Self::admin_token), so that `/admin` is not open on a network. A
    /// request's `Host` may then also name that address.
    pub allow_non_loopback: bool,
    /// The Bearer token clients must present.
    pub token: String,
    /// The Bearer token `/admin` requires; `None` (the default) requires none.
    pub admin_token: Option<String>,
    /// Where state is kept across restarts; `None` keeps it in memory only.
    pub state_file: Option<PathBuf>,
    /// How long a new load balancer stays `new` before it is `active` with an IP.
    pub lb_activation_delay: Duration,
    /// Requests allowed per [`rate_limit_window`](Self::rate_limit_window).
    pub rate_limit: u32,
    /// The rate-limit window.
    pub rate_limit_window: Duration,
    /// Whether `/v2/x-routes` (the simulator's extension) is served; without it, it answers
    /// 404 like DigitalOcean's API, and the provider offers no routes.
    pub routes_extension: bool,
    /// The range load balancers' addresses come from, turning on the data plane: each
    /// active load balancer listens on its address and forwards to its droplets (see the
    /// crate docs). `None` (the default): load balancers are records, with addresses of
    /// 198.18.0.0/15 that lead nowhere. A range that is not loopback needs
    /// [`allow_non_loopback`](Self::allow_non_loopback), and the range must be local to the
    /// simulator's network namespace (`ip route add local <range> dev lo`).
    pub load_balancer_addresses: Option<AddressRange>,
    /// The range dual-stack load balancers' IPv6 addresses come from (`network_stack:
    /// DUALSTACK`): each listens there too, with the same rules and targets. Needs
    /// [`load_balancer_addresses`](Self::load_balancer_addresses). `::1/128` (one load
    /// balancer, on loopback) or a unique-local range (`fd00::/8`), which needs
    /// [`allow_non_loopback`](Self::allow_non_loopback) and must be local to the simulator's
    /// network namespace (`ip -6 route add local <range> dev lo`) and bindable there: unlike
    /// IPv4, Linux binds an IPv6 address of a local route only with
    /// `sysctl -w net.ipv6.ip_nonlocal_bind=1` (per namespace). `None` (the default):
    /// with the data plane on, a dual-stack load balancer gets no IPv6 address (as a
    /// `REGIONAL_NETWORK` one never does); without it, one of 2001:db8:1b::/64 that leads
    /// nowhere.
    pub load_balancer_addresses_v6: Option<AddressRangeV6>,
    /// Whether the routes of `/v2/x-routes` carry traffic: each is a route of the
    /// simulator's network namespace to the target droplet's private address, kept in step
    /// with the API (see the crate docs). Needs `CAP_NET_ADMIN` there and iproute2's `ip`;
    /// meant for a simulator in a test cluster's network namespace, whose nodes are its
    /// droplets. Default off: routes are records.
    pub kernel_routes: bool,
}

impl SimulatorConfig {
    /// Loopback, a free port, in-memory state, 1 s LB activation, 5000 requests a second.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            allow_non_loopback: false,
            token: token.into(),
            admin_token: None,
            state_file: None,
            lb_activation_delay: Duration::from_secs(1),
            rate_limit: 5000,
            rate_limit_window: Duration::from_secs(1),
            routes_extension: true,
            load_balancer_addresses: None,
            load_balancer_addresses_v6: None,
            kernel_routes: false,
        }
    }
}

/// Faults to inject into `/v2` requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Faults {
    /// The fraction (0..=1) of requests answered 500.
    pub error_rate: f64,
    /// Added to every request, in milliseconds.
    pub latency_ms: u64,
    /// The next this-many requests are answered 429.
    pub burst_429: u32,
    /// Then the next this-many requests are answered 503 (with `Retry-After`).
    pub burst_503: u32,
    /// The `Retry-After` (seconds) of injected 429s and 503s.
    pub retry_after_secs: u64,
    /// The next this-many requests are answered 200 with a body that is not JSON.
    pub malformed: u32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Data {
    next_id: u64,
    droplets: BTreeMap<u64, Droplet>,
    load_balancers: BTreeMap<String, LoadBalancerObject>,
    /// Unix milliseconds at which a `new` load balancer becomes active.
    lb_activate_at: BTreeMap<String, u64>,
    routes: BTreeMap<u64, XRoute>,
}

/// One `/v2` request the simulator answered, for tests that check when requests came.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestRecord {
    /// When it arrived, since the simulator started.
    pub at: Duration,
    /// Its method and route, e.g. `GET /v2/droplets/{id}` (the keys of the counters).
    pub route: String,
    /// The status it was answered with.
    pub status: u16,
}

/// How many [`RequestRecord`]s the simulator keeps (the latest).
const REQUEST_LOG_LEN: usize = 10_000;

#[derive(Debug)]
struct Inner {
    data: Data,
    faults: Faults,
    requests: BTreeMap<String, u64>,
    /// Requests by route and query keys (`GET /v2/droplets?name=&page=&per_page=`).
    shapes: BTreeMap<String, u64>,
    log: VecDeque<RequestRecord>,
    window_start_ms: u64,
    window_count: u32,
    rng: u64,
}

#[derive(Debug)]
struct Shared {
    config: SimulatorConfig,
    /// The bound address: its port is the one a request's `Host` must name.
    addr: SocketAddr,
    started: Instant,
    inner: Mutex<Inner>,
    /// Told of every change to the state, for the data plane.
    changed: Arc<tokio::sync::Notify>,
    /// Told of every change to the state, for the route table.
    routes_changed: Arc<tokio::sync::Notify>,
    /// The data plane's targets and their health (`None`: not probed yet), by load
    /// balancer ID.
    health: Mutex<BTreeMap<String, data_plane::TargetHealth>>,
}

/// A handle on a simulator's state, for in-process tests (the admin interface's operations).
#[derive(Clone, Debug)]
pub struct SimulatorHandle {
    shared: Arc<Shared>,
}

/// A running simulator; dropping it does not stop it, [`shutdown`](Self::shutdown) does.
#[derive(Debug)]
pub struct RunningSimulator {
    addr: SocketAddr,
    handle: SimulatorHandle,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    data_plane: Option<JoinHandle<()>>,
    route_table: Option<JoinHandle<()>>,
}

/// Why the simulator cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimulatorError {
    /// Only loopback addresses may be bound (without `allow_non_loopback`).
    #[error("refusing to bind {0}: the simulator binds loopback addresses only")]
    NotLoopback(SocketAddr),
    /// A non-loopback address without an admin token.
    #[error("refusing to bind {0} without an admin token: /admin would be open to its network")]
    NoAdminToken(SocketAddr),
    /// Load balancer addresses outside loopback (without `allow_non_loopback`).
    #[error(
        "refusing load balancer addresses in {0}: without --non-loopback on they must be loopback"
    )]
    NotLoopbackRange(AddressRange),
    /// An IPv6 load balancer range that is not `::1/128` (without `allow_non_loopback`).
    #[error(
        "refusing IPv6 load balancer addresses in {0}: without --non-loopback on the range \
         must be ::1/128"
    )]
    NotLoopbackRangeV6(AddressRangeV6),
    /// An IPv6 load balancer range without an IPv4 one (the data plane is off).
    #[error(
        "IPv6 load balancer addresses ({0}) need IPv4 ones too (--lb-addresses): a dual-stack \
         load balancer has both"
    )]
    V6WithoutV4(AddressRangeV6),
    /// Binding or reading state failed. The message includes the cause (which is therefore
    /// not also a `source()`, so that printing the chain does not say it twice).
    #[error("{context}: {cause}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        cause: std::io::Error,
    },
    /// The state file is not valid JSON (the message includes the cause).
    #[error("state file {}: {cause}", path.display())]
    State {
        /// The file.
        path: PathBuf,
        /// The cause.
        cause: serde_json::Error,
    },
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

impl RunningSimulator {
    /// Loads state, binds and serves in a background task.
    pub async fn start(config: SimulatorConfig) -> Result<Self, SimulatorError> {
        if !config.listen.ip().is_loopback() {
            if !config.allow_non_loopback {
                return Err(SimulatorError::NotLoopback(config.listen));
            }
            if config.admin_token.as_deref().is_none_or(str::is_empty) {
                return Err(SimulatorError::NoAdminToken(config.listen));
            }
        }
        if let Some(range) = config.load_balancer_addresses
            && !range.is_loopback()
            && !config.allow_non_loopback
        {
            return Err(SimulatorError::NotLoopbackRange(range));
        }
        if let Some(range) = config.load_balancer_addresses_v6 {
            if config.load_balancer_addresses.is_none() {
                return Err(SimulatorError::V6WithoutV4(range));
            }
            if !range.is_loopback() && !config.allow_non_loopback {
                return Err(SimulatorError::NotLoopbackRangeV6(range));
            }
        }
        let mut data = Data::default();
        if let Some(path) = &config.state_file
            && path.exists()
        {
            let bytes = std::fs::read(path).map_err(|cause| SimulatorError::Io {
                context: format!("reading state file {}", path.display()),
                cause,
            })?;
            data = serde_json::from_slice(&bytes).map_err(|cause| SimulatorError::State {
                path: path.clone(),
                cause,
            })?;
        }
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|cause| SimulatorError::Io {
                    context: format!("binding {}", config.listen),
                    cause,
                })?;
        let addr = listener.local_addr().map_err(|cause| SimulatorError::Io {
            context: "reading the bound address".into(),
            cause,
        })?;
        let shared = Arc::new(Shared {
            config,
            addr,
            started: Instant::now(),
            inner: Mutex::new(Inner {
                data,
                faults: Faults::default(),
                requests: BTreeMap::new(),
                shapes: BTreeMap::new(),
                log: VecDeque::new(),
                window_start_ms: now_ms(),
                window_count: 0,
                rng: 0x9E37_79B9_7F4A_7C15,
            }),
            changed: Arc::new(tokio::sync::Notify::new()),
            routes_changed: Arc::new(tokio::sync::Notify::new()),
            health: Mutex::new(BTreeMap::new()),
        });
        let handle = SimulatorHandle { shared };
        let data_plane = handle.shared.config.load_balancer_addresses.map(|_| {
            let (read, publish) = (handle.clone(), handle.clone());
            tokio::spawn(data_plane::run(
                Arc::clone(&handle.shared.changed),
                move || read.data_plane_specs(),
                move |health| {
                    *publish.shared.health.lock() = health;
                },
            ))
        });
        let route_table = handle.shared.config.kernel_routes.then(|| {
            let read = handle.clone();
            tokio::spawn(route_table::run(
                Arc::clone(&handle.shared.routes_changed),
                move || read.route_table(),
            ))
        });
        let app = http::router(handle.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Self {
            addr,
            handle,
            stop: Some(stop),
            task: Some(task),
            data_plane,
            route_table,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, the `apiUrl` of the provider's cloud-config.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The state handle.
    pub fn handle(&self) -> &SimulatorHandle {
        &self.handle
    }

    /// Stops serving (the API and every load balancer) and waits for the server task.
    pub async fn shutdown(mut self) {
        for task in [self.data_plane.take(), self.route_table.take()]
            .into_iter()
            .flatten()
        {
            task.abort();
            let _ = task.await;
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl SimulatorHandle {
    fn inner(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.shared.inner.lock()
    }

    /// Called after every change to the state: tells the data plane, and writes the state
    /// file if there is one.
    fn persist(&self, inner: &Inner) {
        self.shared.changed.notify_one();
        self.shared.routes_changed.notify_one();
        let Some(path) = &self.shared.config.state_file else {
            return;
        };
        let Ok(bytes) = serde_json::to_vec_pretty(&inner.data) else {
            return;
        };
        let tmp = path.with_extension("tmp");
        if let Err(err) = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path)) {
            tracing::warn!(error = %err, path = %path.display(), "cannot write the state file");
        }
    }

    /// Creates a running droplet with a private and a public IPv4 address and an IPv6 one
    /// (of 2001:db8::/64, a record that leads nowhere), in the region's default VPC. A size or region the catalogue does not know is taken as
    /// given (the admin interface's leniency; `POST /v2/droplets` refuses them).
    pub fn create_droplet(&self, name: &str, size_slug: &str, region: &str) -> Droplet {
        self.create_droplet_at(name, size_slug, region, None)
    }

    /// [`create_droplet`](Self::create_droplet) with this private IPv4 address instead of the
    /// next of 10.130.0.0/16: a droplet standing for a machine that exists (a test cluster's
    /// node, whose kubelet was given that address).
    pub fn create_droplet_at(
        &self,
        name: &str,
        size_slug: &str,
        region: &str,
        private_ip: Option<std::net::Ipv4Addr>,
    ) -> Droplet {
        self.create_droplet_with(name, size_slug, region, private_ip, None)
    }

    /// [`create_droplet_at`](Self::create_droplet_at) with this public IPv6 address too,
    /// instead of a made-up one: a droplet standing for a dual-stack machine that exists (a
    /// test cluster's node with that IPv6 address, which the provider reports as an
    /// `ExternalIP`, as DigitalOcean's CCM reports a droplet's public IPv6 address).
    pub fn create_droplet_with(
        &self,
        name: &str,
        size_slug: &str,
        region: &str,
        private_ip: Option<std::net::Ipv4Addr>,
        ipv6: Option<std::net::Ipv6Addr>,
    ) -> Droplet {
        let mut inner = self.inner();
        inner.data.next_id += 1;
        let n = inner.data.next_id;
        let id = 100_000 + n;
        let size = catalog::size(size_slug).unwrap_or_else(|| Size {
            slug: size_slug.to_owned(),
            ..Size::default()
        });
        let (third, fourth) = (n / 250, n % 250 + 2);
        let droplet = Droplet {
            id,
            name: name.to_owned(),
            memory: size.memory,
            vcpus: size.vcpus,
            disk: size.disk,
            locked: false,
            status: "active".into(),
            created_at: catalog::rfc3339(now_ms()),
            features: vec!["private_networking".into(), "ipv6".into()],
            size_slug: size.slug.clone(),
            size,
            region: catalog::region(region).unwrap_or_else(|| Region {
                slug: region.to_owned(),
                name: region.to_owned(),
                ..Region::default()
            }),
            networks: Networks {
                v4: vec![
                    match private_ip {
                        Some(ip) => NetworkV4 {
                            ip_address: ip.to_string(),
                            netmask: "255.255.255.0".into(),
                            gateway: std::net::Ipv4Addr::from(u32::from(ip) & 0xffff_ff00 | 1)
                                .to_string(),
                            kind: "private".into(),
                        },
                        None => NetworkV4 {
                            ip_address: format!("10.130.{third}.{fourth}"),
                            netmask: "255.255.0.0".into(),
                            gateway: "10.130.0.1".into(),
                            kind: "private".into(),
                        },
                    },
                    NetworkV4 {
                        ip_address: format!("198.51.{third}.{fourth}"),
                        netmask: "255.255.240.0".into(),
                        gateway: "198.51.0.1".into(),
                        kind: "public".into(),
                    },
                ],
                v6: vec![match ipv6 {
                    Some(ip) => NetworkV6 {
                        ip_address: ip.to_string(),
                        netmask: 64,
                        gateway: String::new(),
                        kind: "public".into(),
                    },
                    None => NetworkV6 {
                        ip_address: format!("2001:db8::{n:x}"),
                        netmask: 64,
                        gateway: "2001:db8::1".into(),
                        kind: "public".into(),
                    },
                }],
            },
            tags: Vec::new(),
            vpc_uuid: catalog::vpc_uuid(region),
        };
        inner.data.droplets.insert(id, droplet.clone());
        self.persist(&inner);
        droplet
    }

    /// Deletes a droplet; whether it existed.
    pub fn delete_droplet(&self, id: u64) -> bool {
        let mut inner = self.inner();
        let found = inner.data.droplets.remove(&id).is_some();
        self.persist(&inner);
        found
    }

    /// Sets a droplet's status (`new`, `active`, `off` or `archive`); whether it exists.
    pub fn set_droplet_status(&self, id: u64, status: &str) -> bool {
        let mut inner = self.inner();
        let found = match inner.data.droplets.get_mut(&id) {
            Some(d) => {
                d.status = status.to_owned();
                true
            }
            None => false,
        };
        self.persist(&inner);
        found
    }

    /// All droplets.
    pub fn droplets(&self) -> Vec<Droplet> {
        self.inner().data.droplets.values().cloned().collect()
    }

    /// All load balancers (activating those due).
    pub fn load_balancers(&self) -> Vec<LoadBalancerObject> {
        let mut inner = self.inner();
        activate_due(&mut inner.data, self.ranges());
        inner.data.load_balancers.values().cloned().collect()
    }

    /// The data plane's address ranges: IPv4 (`None`: the data plane is off), IPv6.
    fn ranges(&self) -> Ranges<'_> {
        Ranges {
            v4: self.shared.config.load_balancer_addresses.as_ref(),
            v6: self.shared.config.load_balancer_addresses_v6.as_ref(),
        }
    }

    /// What the data plane should run: each active load balancer's spec, by ID.
    /// The route table the API's routes ask for (see `route_table`).
    fn route_table(&self) -> route_table::Table {
        let inner = self.inner();
        let routes: Vec<XRoute> = inner.data.routes.values().cloned().collect();
        let droplets: Vec<Droplet> = inner.data.droplets.values().cloned().collect();
        route_table::desired(&routes, &droplets)
    }

    fn data_plane_specs(&self) -> BTreeMap<String, data_plane::LbSpec> {
        let mut inner = self.inner();
        let before = inner.data.lb_activate_at.len();
        activate_due(&mut inner.data, self.ranges());
        if inner.data.lb_activate_at.len() != before {
            self.persist(&inner);
        }
        let droplets: Vec<Droplet> = inner.data.droplets.values().cloned().collect();
        inner
            .data
            .load_balancers
            .iter()
            .filter_map(|(id, lb)| Some((id.clone(), data_plane::spec_of(lb, &droplets)?)))
            .collect()
    }

    /// The data plane's view of a load balancer: each target's private address and whether
    /// it passes the health check (empty without the data plane, or before it is active).
    pub fn load_balancer_health(&self, id: &str) -> Vec<(std::net::Ipv4Addr, bool)> {
        self.shared
            .health
            .lock()
            .get(id)
            .map(|targets| {
                targets
                    .iter()
                    .map(|&(ip, healthy)| (ip, healthy.unwrap_or(false)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `lbs` as the API shows them: with the `x_droplet_health` extension, each droplet
    /// behind one (by ID or tag) and how it stands in the data plane's health check:
    /// `unknown` until the load balancer is active and a probe of the droplet has answered
    /// (always, without the data plane).
    fn shown(&self, mut lbs: Vec<LoadBalancerObject>) -> Vec<LoadBalancerObject> {
        use ccm_do_like_cloud::api::{
            DROPLET_HEALTHY, DROPLET_UNHEALTHY, DROPLET_UNKNOWN, DropletHealth,
        };
        let droplets = self.droplets();
        let health = self.shared.health.lock().clone();
        for lb in &mut lbs {
            let targets = health.get(&lb.id).filter(|_| lb.status == "active");
            let mut behind: Vec<&Droplet> = lb
                .droplet_ids
                .iter()
                .filter_map(|id| droplets.iter().find(|d| d.id == *id))
                .collect();
            if !lb.tag.is_empty() {
                behind.extend(droplets.iter().filter(|d| d.tags.contains(&lb.tag)));
            }
            behind.dedup_by_key(|d| d.id);
            let entries = behind
                .into_iter()
                .map(|d| {
                    let ip = d
                        .networks
                        .v4
                        .iter()
                        .find(|n| n.kind == "private")
                        .and_then(|n| n.ip_address.parse::<std::net::Ipv4Addr>().ok());
                    let probed = targets
                        .and_then(|t| t.iter().find(|(at, _)| Some(*at) == ip))
                        .and_then(|(_, healthy)| *healthy);
                    let status = match probed {
                        Some(true) => DROPLET_HEALTHY,
                        Some(false) => DROPLET_UNHEALTHY,
                        None => DROPLET_UNKNOWN,
                    };
                    DropletHealth {
                        droplet_id: d.id,
                        status: status.to_owned(),
                    }
                })
                .collect();
            lb.x_droplet_health = Some(entries);
        }
        lbs
    }

    /// One load balancer as the API shows it (see [`shown`](Self::shown)).
    pub(crate) fn shown_one(&self, lb: LoadBalancerObject) -> LoadBalancerObject {
        self.shown(vec![lb]).pop().unwrap_or_default()
    }

    /// Every load balancer as the API shows it (see [`shown`](Self::shown)).
    pub(crate) fn shown_load_balancers(&self) -> Vec<LoadBalancerObject> {
        self.shown(self.load_balancers())
    }

    /// All extension routes.
    pub fn routes(&self) -> Vec<XRoute> {
        self.inner().data.routes.values().cloned().collect()
    }

    /// Replaces the injected faults.
    pub fn set_faults(&self, faults: Faults) {
        self.inner().faults = faults;
    }

    /// How many `/v2` requests matched `key`, e.g. `"GET /v2/droplets"` or `"429"`.
    pub fn request_count(&self, key: &str) -> u64 {
        self.inner().requests.get(key).copied().unwrap_or_default()
    }

    /// All request counters.
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        self.inner().requests.clone()
    }

    /// Authenticated requests by route and query keys, e.g.
    /// `GET /v2/droplets?name=&page=&per_page=` (what a client asks, without values).
    pub fn request_shapes(&self) -> BTreeMap<String, u64> {
        self.inner().shapes.clone()
    }

    /// Zeroes the request counters and empties the request log.
    pub fn reset_request_counts(&self) {
        let mut inner = self.inner();
        inner.requests.clear();
        inner.shapes.clear();
        inner.log.clear();
    }

    /// The latest `/v2` requests (at most 10 000), in the order they arrived.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        let mut log: Vec<RequestRecord> = self.inner().log.iter().cloned().collect();
        log.sort_by_key(|r| r.at);
        log
    }
}

/// The data plane's address ranges (see [`SimulatorHandle::ranges`]).
#[derive(Clone, Copy, Debug)]
struct Ranges<'a> {
    v4: Option<&'a AddressRange>,
    v6: Option<&'a AddressRangeV6>,
}

/// Turns the load balancers whose activation is due `active` and gives them addresses:
/// from the ranges when the data plane is on (an exhausted range leaves one `errored`), else
/// from 198.18.0.0/15 and, for a dual-stack one, 2001:db8:1b::/64. Then gives each active
/// dual-stack load balancer without an IPv6 address one, and takes it from those no longer
/// dual-stack (an update changed their `network_stack`).
fn activate_due(data: &mut Data, ranges: Ranges<'_>) {
    let now = now_ms();
    let due: Vec<String> = data
        .lb_activate_at
        .iter()
        .filter(|(_, at)| **at <= now)
        .map(|(id, _)| id.clone())
        .collect();
    for id in due {
        data.lb_activate_at.remove(&id);
        data.next_id += 1;
        let n = data.next_id;
        if let Some(range) = ranges.v4 {
            let used: Vec<std::net::Ipv4Addr> = data
                .load_balancers
                .values()
                .filter_map(|lb| lb.ip.parse().ok())
                .collect();
            let free = range.first_free(&used);
            if let Some(lb) = data.load_balancers.get_mut(&id) {
                match free {
                    Some(ip) => {
                        lb.status = "active".into();
                        lb.ip = ip.to_string();
                    }
                    None => {
                        tracing::warn!(lb = %id, %range, "no load balancer address left");
                        lb.status = "errored".into();
                    }
                }
            }
        } else if let Some(lb) = data.load_balancers.get_mut(&id) {
            lb.status = "active".into();
            // Unique while fewer than 64000 IDs were handed out.
            lb.ip = format!("198.18.{}.{}", (n / 250) % 256, n % 250 + 2);
        }
    }
    assign_ipv6(data, ranges);
}

/// Gives each active dual-stack load balancer without an IPv6 address one (of `ranges.v6`
/// with the data plane, else of 2001:db8:1b::/64), and takes it from the others. With the
/// data plane, an address outside the range (a state file of another run) is replaced, and
/// a load balancer for which the range has none left is `errored`, as an exhausted IPv4
/// range leaves it. None is given with the data plane on but no IPv6 range, nor to a
/// passthrough load balancer (`REGIONAL_NETWORK`): its packets reach the droplets
/// unchanged, and they have no IPv6 address here to take them.
fn assign_ipv6(data: &mut Data, ranges: Ranges<'_>) {
    let mut used: Vec<std::net::Ipv6Addr> = Vec::new();
    let mut wanting = Vec::new();
    let can_give = ranges.v4.is_none() || ranges.v6.is_some();
    for (id, lb) in &mut data.load_balancers {
        let wants = lb.status == "active" && lb.is_dual_stack() && !lb.is_passthrough() && can_give;
        let kept =
            lb.ipv6.parse::<std::net::Ipv6Addr>().ok().filter(|ip| {
                ranges.v4.is_none() || ranges.v6.is_some_and(|range| range.contains(*ip))
            });
        match (wants, kept) {
            (false, _) => lb.ipv6.clear(),
            (true, Some(ip)) => used.push(ip),
            (true, None) => {
                lb.ipv6.clear();
                wanting.push(id.clone());
            }
        }
    }
    for id in wanting {
        let ip = match (ranges.v4, ranges.v6) {
            (Some(_), Some(range)) => range.first_free(&used),
            (Some(_), None) => None, // not wanting: see `can_give`
            (None, _) => {
                data.next_id += 1;
                Some(std::net::Ipv6Addr::from(
                    0x2001_0db8_001b_0000_0000_0000_0000_0000_u128 | u128::from(data.next_id),
                ))
            }
        };
        let Some(lb) = data.load_balancers.get_mut(&id) else {
            continue;
        };
        match ip {
            Some(ip) => {
                used.push(ip);
                lb.ipv6 = ip.to_string();
            }
            None => {
                tracing::warn!(lb = %id, "no IPv6 load balancer address left for a dual-stack load balancer");
                lb.status = "errored".into();
            }
        }
    }
}

/// A request ID for an error answer: UUID-shaped, unique in this process.
fn request_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("1d4c0b5e-7f2a-4c3b-9e8d-{n:012x}")
}

/// An error answer in DigitalOcean's shape: `{"id", "message", "request_id"}`, the request
/// ID also in `x-request-id`.
fn error(status: StatusCode, id: &str, message: impl Into<String>) -> Response {
    let body = ErrorBody {
        id: id.to_owned(),
        message: message.into(),
        request_id: request_id(),
    };
    let mut resp = (status, Json(&body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&body.request_id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// A 422 with DigitalOcean's error id.
fn unprocessable(message: impl Into<String>) -> Response {
    error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "unprocessable_entity",
        message,
    )
}

/// Parses a JSON body; one that is not JSON, or not of the documented shape, is a 400
/// (the error is that answer's message).
fn body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("the request body is not valid: {e}"))
}

/// A 400 `bad_request`.
fn bad_request(message: String) -> Response {
    error(StatusCode::BAD_REQUEST, "bad_request", message)
}

fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "The resource you were accessing could not be found.",
    )
}
