//! Forwarding: a load balancer's targets with their health ([`Pool`]), and one task per
//! forwarding rule that carries a TCP connection or a UDP flow to a healthy target's port.
//!
//! TCP: each accepted connection goes to the next healthy target (round robin, the one with
//! the fewest open connections for `least_connections`, or by the client's address for
//! `x_client_ip` stickiness), trying up to [`CONNECT_ATTEMPTS`] targets when one does not
//! accept, and its bytes are copied both ways until either side closes. UDP: each client address is a flow pinned to one target
//! until it has been idle for [`UDP_IDLE`]; answers from the target go back to the client
//! from the load balancer's address. With no healthy target at all, every target is a
//! candidate (Envoy's "panic" routing: health checks lag behind recovery); with no target, or
//! none that accepts, a connection is closed at once and a datagram is dropped; so is a
//! client the load balancer's [`Firewall`] refuses.
//! Connections and flows are capped per rule, and all of them end when the rule's task is
//! dropped (the load balancer was deleted or its rule changed).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::health::Health;

/// How long a connection to a target may take (targets are on the load balancer's own
/// network: a live one answers in well under a millisecond).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How many targets a TCP connection tries before it is closed: one that refuses or does not
/// answer is skipped for the next healthy one, as HAProxy's `retries` with `redispatch` do,
/// so a node that lost its endpoints costs no connection while its health check catches up.
const CONNECT_ATTEMPTS: usize = 3;
/// Open TCP connections per forwarding rule; more are refused (closed at once).
pub(crate) const MAX_CONNECTIONS: usize = 4096;
/// UDP flows per forwarding rule; datagrams of new clients beyond it are dropped.
pub(crate) const MAX_UDP_FLOWS: usize = 1024;
/// A UDP flow with no datagram either way for this long is forgotten.
pub(crate) const UDP_IDLE: Duration = Duration::from_secs(30);
/// The largest UDP datagram relayed.
const MAX_DATAGRAM: usize = 65_535;

/// How a load balancer picks a target for a new connection or flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algorithm {
    /// The next healthy target in turn.
    RoundRobin,
    /// The healthy target with the fewest open connections.
    LeastConnections,
    /// The healthy target a hash of the client's address names (sticky sessions
    /// `x_client_ip`): one client, one target, while the healthy set stays.
    ClientIp,
}

#[derive(Debug)]
struct Target {
    address: Ipv4Addr,
    health: Health,
    open: usize,
}

/// One firewall network: an IPv4 or an IPv6 network and its prefix length (a client of the
/// other family never matches it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Net {
    V4(u32, u8),
    V6(u128, u8),
}

impl Net {
    /// From `ip:<address>` or `cidr:<network>/<len>` (already validated by the API).
    fn parse(rule: &str) -> Option<Self> {
        match ccm_do_like_cloud::api::LbFirewall::source(rule).ok()? {
            (std::net::IpAddr::V4(v4), len) => Some(Self::V4(u32::from(v4), len)),
            (std::net::IpAddr::V6(v6), len) => Some(Self::V6(u128::from(v6), len)),
        }
    }

    fn contains(&self, ip: std::net::IpAddr) -> bool {
        match (*self, ip) {
            (Self::V4(net, len), std::net::IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                u32::from(ip) & mask == net & mask
            }
            (Self::V6(net, len), std::net::IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                u128::from(ip) & mask == net & mask
            }
            _ => false,
        }
    }
}

/// Which clients a load balancer serves: with `allow` rules only those they match, never one
/// a `deny` rule matches (DigitalOcean's load balancer firewall).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Firewall {
    allow: Vec<Net>,
    deny: Vec<Net>,
}

impl Firewall {
    /// From the API's firewall (a rule that does not parse matches nothing).
    pub(crate) fn from_api(firewall: Option<&ccm_do_like_cloud::api::LbFirewall>) -> Self {
        let nets = |rules: &[String]| rules.iter().filter_map(|r| Net::parse(r)).collect();
        let (allow, deny) = firewall.map_or((&[][..], &[][..]), |f| (&f.allow[..], &f.deny[..]));
        Self {
            // No allow rules: every client a deny rule does not match.
            allow: if allow.is_empty() {
                vec![Net::V4(0, 0), Net::V6(0, 0)]
            } else {
                nets(allow)
            },
            deny: nets(deny),
        }
    }

    /// Whether `client` may connect.
    pub(crate) fn admits(&self, client: std::net::IpAddr) -> bool {
        // A dual-stack load balancer's IPv6 clients arrive as such; an IPv4-mapped address
        // (an IPv4 client of an IPv6 socket) is judged as the IPv4 address it is.
        let client = match client {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(client, std::net::IpAddr::V4),
            v4 => v4,
        };
        !self.deny.iter().any(|n| n.contains(client))
            && self.allow.iter().any(|n| n.contains(client))
    }
}

/// A load balancer's targets and their health, shared by its health checkers (which write)
/// and its forwarders (which pick), and its firewall.
#[derive(Debug)]
pub(crate) struct Pool {
    algorithm: Mutex<Algorithm>,
    firewall: Mutex<Firewall>,
    targets: Mutex<Vec<Target>>,
    next: AtomicUsize,
}

/// An open connection or flow to a target; dropping it closes the count.
#[derive(Debug)]
pub(crate) struct Lease {
    pool: Arc<Pool>,
    address: Ipv4Addr,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(t) = self
            .pool
            .targets()
            .iter_mut()
            .find(|t| t.address == self.address)
        {
            t.open = t.open.saturating_sub(1);
        }
    }
}

impl Pool {
    pub(crate) fn new(algorithm: Algorithm) -> Arc<Self> {
        Arc::new(Self {
            algorithm: Mutex::new(algorithm),
            firewall: Mutex::new(Firewall::from_api(None)),
            targets: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
        })
    }

    fn targets(&self) -> MutexGuard<'_, Vec<Target>> {
        self.targets.lock()
    }

    pub(crate) fn set_algorithm(&self, algorithm: Algorithm) {
        *self.algorithm.lock() = algorithm;
    }

    pub(crate) fn set_firewall(&self, firewall: Firewall) {
        *self.firewall.lock() = firewall;
    }

    /// Whether the firewall lets `client` in.
    pub(crate) fn admits(&self, client: std::net::IpAddr) -> bool {
        self.firewall.lock().admits(client)
    }

    /// Makes the targets exactly `addresses`, keeping the health of those already known
    /// (new ones start unchecked, so unhealthy).
    pub(crate) fn set_targets(&self, addresses: &[Ipv4Addr]) {
        let mut targets = self.targets();
        targets.retain(|t| addresses.contains(&t.address));
        for &address in addresses {
            if !targets.iter().any(|t| t.address == address) {
                targets.push(Target {
                    address,
                    health: Health::default(),
                    open: 0,
                });
            }
        }
    }

    /// Records a probe of `address` (ignored if it is no longer a target).
    pub(crate) fn record(&self, address: Ipv4Addr, passed: bool, spec: &super::CheckSpec) {
        if let Some(t) = self.targets().iter_mut().find(|t| t.address == address) {
            let was = t.health.healthy;
            let now = t.health.record(passed, spec);
            if was != now {
                tracing::info!(target = %address, healthy = now, "load balancer target health changed");
            }
        }
    }

    /// Each target and whether it is healthy, in the order they were added.
    pub(crate) fn health(&self) -> Vec<(Ipv4Addr, bool)> {
        self.targets()
            .iter()
            .map(|t| (t.address, t.health.healthy))
            .collect()
    }

    /// Each target and whether it is healthy, `None` before any probe of it answered.
    pub(crate) fn checked_health(&self) -> Vec<(Ipv4Addr, Option<bool>)> {
        self.targets()
            .iter()
            .map(|t| (t.address, t.health.checked().then_some(t.health.healthy)))
            .collect()
    }

    /// A healthy target for a new connection from `client`, counted as open until the lease
    /// is dropped.
    pub(crate) fn pick(self: &Arc<Self>, client: std::net::IpAddr) -> Option<Lease> {
        self.pick_other(client, &[])
    }

    /// [`pick`](Self::pick), among the healthy targets not in `tried`.
    pub(crate) fn pick_other(
        self: &Arc<Self>,
        client: std::net::IpAddr,
        tried: &[Ipv4Addr],
    ) -> Option<Lease> {
        let algorithm = *self.algorithm.lock();
        let mut targets = self.targets();
        // With no healthy target at all, every target is a candidate ("panic" routing, as
        // Envoy does below its panic threshold): the health checks lag behind the targets,
        // and one that is back but not yet `healthy_threshold` passes in beats certain
        // failure. A target that refuses is skipped by the caller's next try.
        let panic = !targets.iter().any(|t| t.health.healthy);
        let healthy: Vec<usize> = (0..targets.len())
            .filter(|&i| {
                (panic || targets[i].health.healthy) && !tried.contains(&targets[i].address)
            })
            .collect();
        let chosen = match algorithm {
            _ if healthy.is_empty() => return None,
            Algorithm::RoundRobin => {
                healthy[self.next.fetch_add(1, Ordering::Relaxed) % healthy.len()]
            }
            Algorithm::ClientIp => healthy[client_hash(client) % healthy.len()],
            Algorithm::LeastConnections => {
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                // Ties go round robin, so an idle pool still spreads.
                (0..healthy.len())
                    .map(|k| healthy[(start + k) % healthy.len()])
                    .min_by_key(|&i| targets[i].open)?
            }
        };
        targets[chosen].open += 1;
        Some(Lease {
            pool: Arc::clone(self),
            address: targets[chosen].address,
        })
    }
}

/// A stable hash of a client address: MurmurHash3's 64-bit finaliser over it (every bit of
/// the address moves the low bits, which the modulo keeps).
fn client_hash(client: std::net::IpAddr) -> usize {
    let mut h = match client {
        std::net::IpAddr::V4(v4) => u64::from(u32::from(v4)),
        std::net::IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            (bits as u64) ^ ((bits >> 64) as u64)
        }
    };
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    usize::try_from(h >> 33).unwrap_or_default()
}

/// Accepts connections on `listener` and carries each to `target_port` of a healthy target.
pub(crate) async fn serve_tcp(listener: TcpListener, target_port: u16, pool: Arc<Pool>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (client, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !pool.admits(from.ip()) {
            continue; // refused by the firewall: closed at once
        }
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            continue; // at the cap: closed at once
        };
        let Some(lease) = pool.pick(from.ip()) else {
            continue; // no target: closed at once
        };
        let pool = Arc::clone(&pool);
        connections.spawn(async move {
            let _slot = slot;
            let mut client = client;
            let mut lease = lease;
            let mut tried = Vec::with_capacity(CONNECT_ATTEMPTS);
            loop {
                let target = SocketAddr::from((lease.address, target_port));
                match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
                    Ok(Ok(mut upstream)) => {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                        return;
                    }
                    Ok(Err(e)) => tracing::debug!(%target, error = %e, "cannot reach the target"),
                    Err(_) => tracing::debug!(%target, "connecting to the target timed out"),
                }
                tried.push(lease.address);
                match pool.pick_other(from.ip(), &tried) {
                    Some(next) if tried.len() < CONNECT_ATTEMPTS => lease = next,
                    _ => return,
                }
            }
        });
    }
}

struct Flow {
    upstream: Arc<UdpSocket>,
    last_seen: Arc<AtomicU64>,
    /// The task relaying the target's answers; aborted with the flow.
    _answers: tokio::task::JoinHandle<()>,
    _lease: Lease,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self._answers.abort();
    }
}

/// Relays datagrams arriving at `socket` to `target_port` of a healthy target, one flow per
/// client address, and the target's answers back.
pub(crate) async fn serve_udp(socket: UdpSocket, target_port: u16, pool: Arc<Pool>) {
    let socket = Arc::new(socket);
    let started = Instant::now();
    let now = move || started.elapsed().as_millis() as u64;
    let mut flows: HashMap<SocketAddr, Flow> = HashMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut sweep = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            received = socket.recv_from(&mut buf) => {
                let Ok((len, client)) = received else { continue };
                if !pool.admits(client.ip()) {
                    continue;
                }
                if !flows.contains_key(&client) {
                    if flows.len() >= MAX_UDP_FLOWS {
                        continue;
                    }
                    let Some(flow) = open_flow(&socket, client, target_port, &pool, now()).await else {
                        continue;
                    };
                    flows.insert(client, flow);
                }
                if let Some(flow) = flows.get(&client) {
                    flow.last_seen.store(now(), Ordering::Relaxed);
                    let _ = flow.upstream.send(&buf[..len]).await;
                }
            }
            _ = sweep.tick() => {
                let idle = UDP_IDLE.as_millis() as u64;
                let at = now();
                flows.retain(|_, f| at.saturating_sub(f.last_seen.load(Ordering::Relaxed)) < idle);
            }
        }
    }
}

async fn open_flow(
    socket: &Arc<UdpSocket>,
    client: SocketAddr,
    target_port: u16,
    pool: &Arc<Pool>,
    now: u64,
) -> Option<Flow> {
    let lease = pool.pick(client.ip())?;
    let upstream = UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))
        .await
        .ok()?;
    upstream
        .connect(SocketAddr::from((lease.address, target_port)))
        .await
        .ok()?;
    let upstream = Arc::new(upstream);
    let last_seen = Arc::new(AtomicU64::new(now));
    let answers = {
        let (upstream, socket, last_seen) = (
            Arc::clone(&upstream),
            Arc::clone(socket),
            Arc::clone(&last_seen),
        );
        let started = Instant::now();
        tokio::spawn(async move {
            let mut buf = vec![0u8; MAX_DATAGRAM];
            loop {
                match upstream.recv(&mut buf).await {
                    Ok(len) => {
                        let elapsed = started.elapsed().as_millis() as u64;
                        last_seen.fetch_max(now + elapsed, Ordering::Relaxed);
                        let _ = socket.send_to(&buf[..len], client).await;
                    }
                    // An ICMP error (the target's port is closed) ends nothing: the next
                    // datagram may find it open.
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        })
    };
    Some(Flow {
        upstream,
        last_seen,
        _answers: answers,
        _lease: lease,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data_plane::CheckSpec;

    fn spec() -> CheckSpec {
        CheckSpec {
            http_path: None,
            port: 1,
            interval: Duration::from_secs(3),
            timeout: Duration::from_secs(3),
            healthy_threshold: 2,
            unhealthy_threshold: 2,
        }
    }

    const CLIENT: std::net::IpAddr = std::net::IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const C: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);

    #[test]
    fn only_healthy_targets_are_picked_in_turn() {
        let pool = Pool::new(Algorithm::RoundRobin);
        pool.set_targets(&[A, B, C]);
        let mut panic: Vec<Ipv4Addr> = (0..3).map(|_| pool.pick(CLIENT).unwrap().address).collect();
        panic.sort();
        assert_eq!(
            panic,
            [A, B, C],
            "none healthy: every target is a candidate"
        );
        let pool = Pool::new(Algorithm::RoundRobin);
        pool.set_targets(&[A, B, C]);
        pool.record(A, true, &spec());
        pool.record(C, true, &spec());
        let picks: Vec<Ipv4Addr> = (0..4).map(|_| pool.pick(CLIENT).unwrap().address).collect();
        assert_eq!(picks, [A, C, A, C]);
    }

    #[test]
    fn the_firewall_allows_the_listed_and_denies_the_denied() {
        let api = |allow: &[&str], deny: &[&str]| ccm_do_like_cloud::api::LbFirewall {
            allow: allow.iter().map(|r| (*r).to_owned()).collect(),
            deny: deny.iter().map(|r| (*r).to_owned()).collect(),
        };
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let open = Firewall::from_api(None);
        assert!(open.admits(ip("10.88.0.1")));
        assert!(
            open.admits(ip("fd00:77::9")),
            "no rules: IPv6 clients of a dual-stack load balancer too"
        );
        let v6 = Firewall::from_api(Some(&api(&["cidr:fd00:77::/64"], &["ip:fd00:77::66"])));
        assert!(v6.admits(ip("fd00:77::9")));
        assert!(!v6.admits(ip("fd00:77::66")), "denied");
        assert!(!v6.admits(ip("fd00:78::9")), "outside the allowed network");
        assert!(
            !v6.admits(ip("10.88.0.1")),
            "an IPv6 rule matches no IPv4 client"
        );
        let mapped = Firewall::from_api(Some(&api(&["ip:10.88.0.1"], &[])));
        assert!(
            mapped.admits(ip("::ffff:10.88.0.1")),
            "an IPv4-mapped client is its IPv4 address"
        );
        assert!(!mapped.admits(ip("fd00::1")));
        let ranges = Firewall::from_api(Some(&api(&["cidr:10.244.1.5/32", "ip:10.88.0.11"], &[])));
        assert!(ranges.admits(ip("10.244.1.5")));
        assert!(ranges.admits(ip("10.88.0.11")));
        assert!(!ranges.admits(ip("10.88.0.1")));
        let halves = Firewall::from_api(Some(&api(&["cidr:0.0.0.0/1", "cidr:128.0.0.0/1"], &[])));
        assert!(halves.admits(ip("10.88.0.1")) && halves.admits(ip("200.1.1.1")));
        let nobody = Firewall::from_api(Some(&api(&["cidr:255.0.0.0/32"], &[])));
        assert!(!nobody.admits(ip("10.88.0.1")));
        let deny = Firewall::from_api(Some(&api(&[], &["cidr:10.88.0.0/24"])));
        assert!(!deny.admits(ip("10.88.0.1")));
        assert!(
            deny.admits(ip("10.244.0.3")),
            "no allow rules: the rest is allowed"
        );
    }

    /// A pool of `algorithm` over `targets`, each healthy after a check that passed.
    fn healthy_pool(algorithm: Algorithm, targets: &[Ipv4Addr]) -> Arc<Pool> {
        let pool = Pool::new(algorithm);
        pool.set_targets(targets);
        for &t in targets {
            pool.record(t, true, &spec());
        }
        pool
    }

    #[test]
    fn client_ip_stickiness_keeps_a_client_on_one_target() {
        let pool = healthy_pool(Algorithm::ClientIp, &[A, B, C]);
        let client = |last: u8| std::net::IpAddr::V4(Ipv4Addr::new(10, 88, 0, last));
        let first = pool.pick(client(1)).unwrap().address;
        for _ in 0..10 {
            assert_eq!(pool.pick(client(1)).unwrap().address, first);
        }
        let spread: std::collections::BTreeSet<Ipv4Addr> = (1..=40)
            .map(|last| pool.pick(client(last)).unwrap().address)
            .collect();
        assert_eq!(spread.len(), 3, "clients spread over the targets");
    }

    #[test]
    fn another_pick_skips_the_targets_tried() {
        let pool = healthy_pool(Algorithm::ClientIp, &[A, B]);
        let first = pool.pick(CLIENT).unwrap().address;
        let second = pool.pick_other(CLIENT, &[first]).unwrap().address;
        assert_ne!(first, second);
        assert!(pool.pick_other(CLIENT, &[A, B]).is_none());
    }

    #[test]
    fn least_connections_prefers_the_idle_target() {
        let pool = healthy_pool(Algorithm::LeastConnections, &[A, B]);
        let first = pool.pick(CLIENT).unwrap();
        let second = pool.pick(CLIENT).unwrap();
        assert_ne!(first.address, second.address, "ties spread");
        drop(first);
        let third = pool.pick(CLIENT).unwrap();
        assert_ne!(third.address, second.address, "the idle one is chosen");
    }

    #[test]
    fn changing_the_targets_keeps_known_health() {
        let pool = Pool::new(Algorithm::RoundRobin);
        pool.set_targets(&[A, B]);
        pool.record(A, true, &spec());
        pool.set_targets(&[A, C]);
        assert_eq!(pool.health(), [(A, true), (C, false)]);
        pool.record(B, true, &spec());
        assert_eq!(pool.health(), [(A, true), (C, false)], "B is gone");
    }
}
