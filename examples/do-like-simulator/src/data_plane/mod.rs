//! The data plane: load balancers that carry traffic. With
//! [`SimulatorConfig::load_balancer_addresses`](crate::SimulatorConfig::load_balancer_addresses)
//! set, each load balancer gets an address of that range when it turns `active`, and the
//! simulator listens there on every forwarding rule's entry port (TCP, or UDP for `udp`
//! rules; `http`/`https`/`http2` rules are carried as TCP streams, unchanged) and forwards to
//! the rule's target port of the targets (its `droplet_ids`, or the droplets with its `tag`,
//! at their private IPv4 address) that pass its health check. A reconciler keeps the
//! listeners and health checkers in step with the API's state: an update changes the targets
//! and the check without dropping the listeners, a deleted load balancer stops listening at
//! once and its open connections end.
//!
//! A dual-stack load balancer (`network_stack: DUALSTACK`, with
//! [`SimulatorConfig::load_balancer_addresses_v6`](crate::SimulatorConfig::load_balancer_addresses_v6)
//! set) also gets an address of that IPv6 range and listens on it too, with the same rules,
//! the same targets (still their private IPv4 addresses: like DigitalOcean's dual-stack load
//! balancers, it proxies IPv6 clients to droplets over IPv4) and the same health checks.
//!
//! The forwarders live in the simulator's own process, as tasks: one process owns the
//! address range (binding is one `bind` per rule, with no address to add per load balancer
//! when the range is routed locally, `ip route add local <range> dev lo`), a load balancer
//! costs a few tasks and sockets instead of a process, and the state they follow is in the
//! same memory. A task that fails ends alone; a failed bind is retried every
//! [`RETRY_BIND`] and logged.

mod forward;
mod health;
mod passthrough;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccm_do_like_cloud::api::{Droplet, LoadBalancerObject};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

pub(crate) use forward::Algorithm;
use forward::{Firewall, Pool};
pub(crate) use health::CheckSpec;

/// How often a rule whose address could not be bound is tried again.
const RETRY_BIND: Duration = Duration::from_secs(1);
/// How often the reconciler looks at the state without being told of a change (load
/// balancers turn `active` on a clock).
const RESYNC: Duration = Duration::from_millis(250);

/// An IPv4 range load balancer addresses are taken from, e.g. `10.88.64.0/24`: its first
/// and last address are not handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressRange {
    network: Ipv4Addr,
    prefix_len: u8,
}

impl AddressRange {
    /// The range's network address.
    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    /// Whether every address of the range is a loopback address.
    pub fn is_loopback(&self) -> bool {
        self.network.is_loopback()
    }

    /// How many addresses it hands out.
    pub fn len(&self) -> u32 {
        (1u32 << (32 - self.prefix_len)) - 2
    }

    /// Whether it hands out none (never: at least a /30).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first address of the range not in `used`, if any is left.
    pub(crate) fn first_free(&self, used: &[Ipv4Addr]) -> Option<Ipv4Addr> {
        let base = u32::from(self.network);
        (1..=self.len())
            .map(|i| Ipv4Addr::from(base + i))
            .find(|a| !used.contains(a))
    }
}

impl FromStr for AddressRange {
    type Err = String;

    /// `a.b.c.d/n` with `n` in 16..=30 and no host bits set.
    fn from_str(s: &str) -> Result<Self, String> {
        let (ip, len) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR (like 10.88.64.0/24)"))?;
        let network: Ipv4Addr = ip
            .parse()
            .map_err(|_| format!("{ip:?} is not an IPv4 address"))?;
        let prefix_len: u8 = len
            .parse()
            .ok()
            .filter(|n| (16..=30).contains(n))
            .ok_or_else(|| format!("the prefix length {len:?} must be 16..=30"))?;
        let mask = u32::MAX << (32 - prefix_len);
        if u32::from(network) & !mask != 0 {
            return Err(format!(
                "{s} has host bits set; the network is {}/{prefix_len}",
                Ipv4Addr::from(u32::from(network) & mask)
            ));
        }
        Ok(Self {
            network,
            prefix_len,
        })
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// An IPv6 range dual-stack load balancers' IPv6 addresses are taken from: a unique-local
/// range (in `fd00::/8`) with a prefix length of 96..=128, e.g. `fd00:77::/112`, or the
/// loopback address alone, `::1/128`. Global addresses are refused: the simulator's traffic
/// stays on loopback or in a test's network namespaces. Its first address (the subnet's
/// anycast address) is not handed out, unless the range is one address (a `/128`: that
/// address, e.g. `::1`, for one load balancer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressRangeV6 {
    network: Ipv6Addr,
    prefix_len: u8,
}

impl AddressRangeV6 {
    /// The range's network address.
    pub fn network(&self) -> Ipv6Addr {
        self.network
    }

    /// Whether it is the loopback address `::1` (alone).
    pub fn is_loopback(&self) -> bool {
        self.network.is_loopback()
    }

    /// How many addresses it hands out.
    pub fn len(&self) -> u32 {
        match self.prefix_len {
            128 => 1,
            // 96..=127: at most 2^32 - 1.
            n => u32::MAX >> (n - 96),
        }
    }

    /// Whether it hands out none (never).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `ip` is one of the addresses it hands out.
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        let (base, ip) = (u128::from(self.network), u128::from(ip));
        let first = base + u128::from(self.prefix_len < 128);
        (first..first + u128::from(self.len())).contains(&ip)
    }

    /// The first address of the range not in `used`, if any is left (at most
    /// `used.len() + 1` tries).
    pub(crate) fn first_free(&self, used: &[Ipv6Addr]) -> Option<Ipv6Addr> {
        let base = u128::from(self.network);
        let first = u128::from(self.prefix_len < 128);
        (0..u128::from(self.len()))
            .map(|i| Ipv6Addr::from(base + first + i))
            .find(|a| !used.contains(a))
    }
}

impl FromStr for AddressRangeV6 {
    type Err = String;

    /// `fdxx:…/n` with `n` in 96..=128 and no host bits set, or `::1/128`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (ip, len) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR (like fd00:77::/112)"))?;
        let network: Ipv6Addr = ip
            .parse()
            .map_err(|_| format!("{ip:?} is not an IPv6 address"))?;
        let prefix_len: u8 = len
            .parse()
            .ok()
            .filter(|n| (96..=128).contains(n))
            .ok_or_else(|| format!("the prefix length {len:?} must be 96..=128"))?;
        let mask = u128::MAX
            .checked_shl(128 - u32::from(prefix_len))
            .unwrap_or(0);
        if u128::from(network) & !mask != 0 {
            return Err(format!(
                "{s} has host bits set; the network is {}/{prefix_len}",
                Ipv6Addr::from(u128::from(network) & mask)
            ));
        }
        let unique_local = network.octets()[0] == 0xfd;
        let loopback = network.is_loopback() && prefix_len == 128;
        if !(unique_local || loopback) {
            return Err(format!(
                "{s} is not unique-local: IPv6 load balancer addresses must be in fd00::/8 \
                 (or ::1/128), never global"
            ));
        }
        Ok(Self {
            network,
            prefix_len,
        })
    }
}

impl fmt::Display for AddressRangeV6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// A forwarding rule as the data plane runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Rule {
    udp: bool,
    entry_port: u16,
    target_port: u16,
}

/// What one active load balancer should be doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LbSpec {
    address: Ipv4Addr,
    /// A dual-stack load balancer's IPv6 address, listened on with the same rules.
    address_v6: Option<Ipv6Addr>,
    /// Whether it is `REGIONAL_NETWORK` or its rules are `x_passthrough`: packets are
    /// routed to a healthy target unchanged ([`passthrough`]) instead of proxied.
    passthrough: bool,
    rules: Vec<Rule>,
    check: CheckSpec,
    targets: Vec<Ipv4Addr>,
    algorithm: Algorithm,
    firewall: Firewall,
}

/// The data plane's view of `lb`: `None` unless it is `active` with an IPv4 address; its
/// IPv6 address is listened on when it is dual-stack and has one.
pub(crate) fn spec_of(lb: &LoadBalancerObject, droplets: &[Droplet]) -> Option<LbSpec> {
    if lb.status != "active" {
        return None;
    }
    let address = lb.ip.parse().ok()?;
    let mut rules: Vec<Rule> = lb
        .forwarding_rules
        .iter()
        .map(|r| Rule {
            udp: r.entry_protocol == "udp",
            entry_port: r.entry_port,
            target_port: r.target_port,
        })
        .collect();
    rules.sort();
    rules.dedup_by_key(|r| (r.udp, r.entry_port));
    let mut targets: Vec<Ipv4Addr> = droplets
        .iter()
        .filter(|d| {
            lb.droplet_ids.contains(&d.id) || (!lb.tag.is_empty() && d.tags.contains(&lb.tag))
        })
        .filter_map(|d| {
            d.networks
                .v4
                .iter()
                .find(|n| n.kind == "private")
                .and_then(|n| n.ip_address.parse().ok())
        })
        .collect();
    targets.sort();
    targets.dedup();
    let check = lb.health_check.as_ref().map(CheckSpec::from_api)?;
    let passthrough = lb.is_passthrough();
    Some(LbSpec {
        address,
        address_v6: lb
            .is_dual_stack()
            .then(|| lb.ipv6.parse().ok())
            .flatten()
            .filter(|_| !passthrough),
        passthrough,
        rules,
        check,
        targets,
        algorithm: if lb
            .sticky_sessions
            .as_ref()
            .is_some_and(|s| s.kind == "x_client_ip")
        {
            Algorithm::ClientIp
        } else if lb.algorithm == "least_connections" {
            Algorithm::LeastConnections
        } else {
            Algorithm::RoundRobin
        },
        firewall: Firewall::from_api(lb.firewall.as_ref()),
    })
}

/// A task that is aborted when its handle is dropped.
#[derive(Debug)]
struct Owned(JoinHandle<()>);

impl Drop for Owned {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A rule being served, or waiting to be bound again.
#[derive(Debug)]
enum Listener {
    Serving { _task: Owned },
    Unbound { since: Instant },
}

/// One load balancer's listeners and health checkers.
#[derive(Debug)]
struct RunningLb {
    spec: LbSpec,
    pool: Arc<Pool>,
    /// By address (IPv4, and IPv6 when dual-stack) and rule.
    listeners: BTreeMap<(IpAddr, Rule), Listener>,
    /// For a passthrough load balancer: the task keeping its route.
    _route: Option<Owned>,
    checkers: BTreeMap<Ipv4Addr, Owned>,
}

impl RunningLb {
    fn new(id: &str, spec: LbSpec) -> Self {
        let pool = Pool::new(spec.algorithm);
        let mut lb = Self {
            pool: Arc::clone(&pool),
            spec: spec.clone(),
            listeners: BTreeMap::new(),
            _route: spec.passthrough.then(|| {
                Owned(tokio::spawn(passthrough::keep_route(
                    id.to_owned(),
                    spec.address,
                    Arc::clone(&pool),
                )))
            }),
            checkers: BTreeMap::new(),
        };
        lb.apply(id, spec, true);
        lb
    }

    /// Brings the listeners, the targets and the checkers to `spec`, touching only what
    /// changed.
    fn apply(&mut self, id: &str, spec: LbSpec, fresh: bool) {
        let check_changed = fresh || spec.check != self.spec.check;
        self.pool.set_algorithm(spec.algorithm);
        self.pool.set_firewall(spec.firewall.clone());
        self.pool.set_targets(&spec.targets);
        // A passthrough load balancer listens on nothing: its address is routed.
        let rules: &[Rule] = if spec.passthrough { &[] } else { &spec.rules };
        let addresses = [
            Some(IpAddr::V4(spec.address)),
            spec.address_v6.map(IpAddr::V6),
        ];
        let listened: Vec<(IpAddr, Rule)> = addresses
            .into_iter()
            .flatten()
            .flat_map(|a| rules.iter().map(move |r| (a, *r)))
            .collect();
        self.listeners.retain(|key, _| listened.contains(key));
        for key in listened {
            let retry = match self.listeners.get(&key) {
                None => true,
                Some(Listener::Unbound { since }) => since.elapsed() >= RETRY_BIND,
                Some(Listener::Serving { .. }) => false,
            };
            if retry {
                let listener = bind(id, key.0, key.1, &self.pool);
                self.listeners.insert(key, listener);
            }
        }
        if check_changed {
            self.checkers.clear();
        } else {
            self.checkers.retain(|t, _| spec.targets.contains(t));
        }
        for &target in &spec.targets {
            if !self.checkers.contains_key(&target) {
                let (pool, check) = (Arc::clone(&self.pool), spec.check.clone());
                self.checkers
                    .insert(target, Owned(tokio::spawn(check_loop(pool, check, target))));
            }
        }
        self.spec = spec;
    }
}

/// Binds one rule's socket and starts serving it (in the reconciler's own task: a bind
/// does not block).
fn bind(id: &str, address: IpAddr, rule: Rule, pool: &Arc<Pool>) -> Listener {
    let at = SocketAddr::from((address, rule.entry_port));
    let pool = Arc::clone(pool);
    let bound = if rule.udp {
        std::net::UdpSocket::bind(at)
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .and_then(UdpSocket::from_std)
            .map(|s| tokio::spawn(forward::serve_udp(s, rule.target_port, pool)))
    } else {
        std::net::TcpListener::bind(at)
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .and_then(TcpListener::from_std)
            .map(|s| tokio::spawn(forward::serve_tcp(s, rule.target_port, pool)))
    };
    match bound {
        Ok(task) => {
            tracing::info!(lb = id, %at, udp = rule.udp, target_port = rule.target_port, "load balancer listening");
            Listener::Serving { _task: Owned(task) }
        }
        Err(e) if at.is_ipv6() && e.kind() == std::io::ErrorKind::AddrNotAvailable => {
            // Linux binds an IPv6 address of a `local` route only with this sysctl.
            tracing::warn!(lb = id, %at, error = %e, "cannot bind the load balancer's IPv6 address (is it routed locally, `ip -6 route add local <range> dev lo`, with `sysctl -w net.ipv6.ip_nonlocal_bind=1`?); retrying");
            Listener::Unbound {
                since: Instant::now(),
            }
        }
        Err(e) => {
            tracing::warn!(lb = id, %at, error = %e, "cannot bind the load balancer's address; retrying");
            Listener::Unbound {
                since: Instant::now(),
            }
        }
    }
}

async fn check_loop(pool: Arc<Pool>, check: CheckSpec, target: Ipv4Addr) {
    loop {
        let passed = tokio::time::timeout(check.timeout, health::probe(&check, target))
            .await
            .unwrap_or(false);
        pool.record(target, passed, &check);
        tokio::time::sleep(check.interval).await;
    }
}

/// The running load balancers, by ID; what the reconciler owns.
#[derive(Debug, Default)]
pub(crate) struct DataPlane {
    running: BTreeMap<String, RunningLb>,
}

impl DataPlane {
    /// Brings the running load balancers to `desired` (ID → spec).
    pub(crate) fn reconcile(&mut self, desired: BTreeMap<String, LbSpec>) {
        self.running.retain(|id, lb| {
            // A new address or mode starts afresh.
            let keep = desired.get(id).is_some_and(|d| {
                d.address == lb.spec.address && d.passthrough == lb.spec.passthrough
            });
            if !keep {
                tracing::info!(lb = %id, address = %lb.spec.address, "load balancer stopped");
            }
            keep
        });
        for (id, spec) in desired {
            match self.running.get_mut(&id) {
                Some(lb) => lb.apply(&id, spec, false),
                None => {
                    let lb = RunningLb::new(&id, spec);
                    self.running.insert(id, lb);
                }
            }
        }
    }

    /// Each running load balancer's targets and their health (`None`: not probed yet).
    pub(crate) fn health(&self) -> BTreeMap<String, TargetHealth> {
        self.running
            .iter()
            .map(|(id, lb)| (id.clone(), lb.pool.checked_health()))
            .collect()
    }
}

/// Each target of one load balancer and whether it passes the health check (`None`: no probe
/// of it has answered yet).
pub(crate) type TargetHealth = Vec<(Ipv4Addr, Option<bool>)>;

/// Runs the reconciler until the task is aborted: on every change the API makes (`changed`)
/// and every [`RESYNC`], reads the wanted state with `read` and applies it; publishes the
/// targets' health with `publish`.
pub(crate) async fn run(
    changed: Arc<tokio::sync::Notify>,
    read: impl Fn() -> BTreeMap<String, LbSpec>,
    publish: impl Fn(BTreeMap<String, TargetHealth>),
) {
    let mut plane = DataPlane::default();
    loop {
        plane.reconcile(read());
        publish(plane.health());
        tokio::select! {
            () = changed.notified() => {}
            () = tokio::time::sleep(RESYNC) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccm_do_like_cloud::api::{ForwardingRule, NetworkV4, Networks};

    #[test]
    fn ranges_parse_and_hand_out_free_addresses() {
        let r: AddressRange = "10.88.64.0/24".parse().unwrap();
        assert_eq!(r.to_string(), "10.88.64.0/24");
        assert_eq!(r.len(), 254);
        assert!(!r.is_loopback());
        let used = [Ipv4Addr::new(10, 88, 64, 1), Ipv4Addr::new(10, 88, 64, 3)];
        assert_eq!(r.first_free(&used), Some(Ipv4Addr::new(10, 88, 64, 2)));
        let small: AddressRange = "127.77.0.0/30".parse().unwrap();
        assert!(small.is_loopback());
        let all = [Ipv4Addr::new(127, 77, 0, 1), Ipv4Addr::new(127, 77, 0, 2)];
        assert_eq!(
            small.first_free(&all),
            None,
            "the last address is not handed out"
        );
        for bad in [
            "10.88.64.0",
            "10.88.64.1/24",
            "10.0.0.0/8",
            "10.88.64.0/31",
            "x/24",
        ] {
            assert!(bad.parse::<AddressRange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ipv6_ranges_are_unique_local_or_loopback_and_hand_out_free_addresses() {
        let r: AddressRangeV6 = "fd00:77::/112".parse().unwrap();
        assert_eq!(r.to_string(), "fd00:77::/112");
        assert_eq!(r.len(), 65535);
        assert!(!r.is_loopback());
        let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        assert_eq!(
            r.first_free(&[]),
            Some(a("fd00:77::1")),
            "not the anycast address"
        );
        assert_eq!(
            r.first_free(&[a("fd00:77::1"), a("fd00:77::3")]),
            Some(a("fd00:77::2"))
        );
        let last: AddressRangeV6 = "fd00:77::fffe/127".parse().unwrap();
        assert_eq!(last.len(), 1);
        assert_eq!(last.first_free(&[]), Some(a("fd00:77::ffff")));
        assert_eq!(last.first_free(&[a("fd00:77::ffff")]), None);
        assert!(r.contains(a("fd00:77::1")) && r.contains(a("fd00:77::ffff")));
        assert!(
            !r.contains(a("fd00:77::")),
            "the anycast address is not handed out"
        );
        assert!(!r.contains(a("fd00:77::1:0")) && !r.contains(a("fd00:78::1")));
        let lo: AddressRangeV6 = "::1/128".parse().unwrap();
        assert!(lo.is_loopback());
        assert!(lo.contains(Ipv6Addr::LOCALHOST) && !lo.contains(a("::2")));
        assert_eq!(
            lo.first_free(&[]),
            Some(Ipv6Addr::LOCALHOST),
            "the one address"
        );
        assert_eq!(lo.first_free(&[Ipv6Addr::LOCALHOST]), None);
        let wide: AddressRangeV6 = "fd00::/96".parse().unwrap();
        assert_eq!(wide.len(), u32::MAX);
        for bad in [
            "fd00:77::",
            "fd00:77::1/112",
            "fd00::/64",
            "2001:db8::/112",
            "fc00::/112",
            "fe80::/112",
            "::1/127",
            "::/128",
            "10.0.0.0/24",
            "x/112",
            "fd00::/129",
        ] {
            assert!(bad.parse::<AddressRangeV6>().is_err(), "{bad}");
        }
    }

    fn droplet(id: u64, ip: &str, tags: &[&str]) -> Droplet {
        Droplet {
            id,
            networks: Networks {
                v4: vec![NetworkV4 {
                    ip_address: ip.into(),
                    kind: "private".into(),
                    ..NetworkV4::default()
                }],
                v6: Vec::new(),
            },
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..Droplet::default()
        }
    }

    fn lb() -> LoadBalancerObject {
        LoadBalancerObject {
            status: "active".into(),
            ip: "10.88.64.1".into(),
            forwarding_rules: vec![
                ForwardingRule::new("udp", 53, 30053),
                ForwardingRule::new("http", 80, 30080),
            ],
            health_check: Some(crate::validate::tests::kube_proxy_health_check()),
            droplet_ids: vec![2, 1],
            tag: "web".into(),
            ..LoadBalancerObject::default()
        }
    }

    #[test]
    fn an_active_lb_forwards_its_rules_to_its_droplets_private_addresses() {
        let droplets = [
            droplet(1, "10.88.0.11", &[]),
            droplet(2, "10.88.0.10", &[]),
            droplet(3, "10.88.0.12", &["web"]),
            droplet(4, "10.88.0.13", &["db"]),
        ];
        let spec = spec_of(&lb(), &droplets).unwrap();
        assert_eq!(spec.address, Ipv4Addr::new(10, 88, 64, 1));
        assert_eq!(
            spec.targets,
            ["10.88.0.10", "10.88.0.11", "10.88.0.12"].map(|a| a.parse::<Ipv4Addr>().unwrap())
        );
        assert_eq!(
            spec.rules,
            [
                Rule {
                    udp: false,
                    entry_port: 80,
                    target_port: 30080
                },
                Rule {
                    udp: true,
                    entry_port: 53,
                    target_port: 30053
                },
            ]
        );
        assert_eq!(spec.check.http_path.as_deref(), Some("/healthz"));
        assert_eq!(spec.algorithm, Algorithm::RoundRobin);
    }

    #[test]
    fn a_dual_stack_lb_listens_on_its_ipv6_address_too_with_the_same_targets() {
        let droplets = [droplet(1, "10.88.0.11", &[])];
        let mut dual = lb();
        dual.ipv6 = "fd00:77::1".into();
        assert_eq!(
            spec_of(&dual, &droplets).unwrap().address_v6,
            None,
            "an IPv4 load balancer's stray ipv6 is not listened on"
        );
        dual.network_stack = "DUALSTACK".into();
        let spec = spec_of(&dual, &droplets).unwrap();
        assert_eq!(spec.address_v6, Some("fd00:77::1".parse().unwrap()));
        assert_eq!(spec.address, Ipv4Addr::new(10, 88, 64, 1));
        assert_eq!(spec.targets, [Ipv4Addr::new(10, 88, 0, 11)], "over IPv4");
        dual.ipv6.clear();
        assert_eq!(
            spec_of(&dual, &droplets).unwrap().address_v6,
            None,
            "not before it has one"
        );
    }

    #[test]
    fn a_network_lb_passes_packets_through_as_the_extension_does() {
        let mut network = lb();
        network.forwarding_rules = vec![ForwardingRule::new("tcp", 80, 80)];
        assert!(
            !spec_of(&network, &[]).unwrap().passthrough,
            "REGIONAL by default"
        );
        network.lb_type = "REGIONAL_NETWORK".into();
        assert!(spec_of(&network, &[]).unwrap().passthrough);
        let mut flagged = lb();
        flagged.forwarding_rules = vec![ForwardingRule {
            x_passthrough: true,
            ..ForwardingRule::new("tcp", 80, 80)
        }];
        assert!(spec_of(&flagged, &[]).unwrap().passthrough);
    }

    #[test]
    fn only_an_active_lb_with_an_address_and_a_check_runs() {
        let mut new = lb();
        new.status = "new".into();
        assert!(spec_of(&new, &[]).is_none());
        let mut no_ip = lb();
        no_ip.ip.clear();
        assert!(spec_of(&no_ip, &[]).is_none());
        let mut no_check = lb();
        no_check.health_check = None;
        assert!(spec_of(&no_check, &[]).is_none());
    }
}
