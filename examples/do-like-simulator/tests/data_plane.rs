//! The data plane on loopback: a load balancer made through the API listens on an address of
//! `--lb-addresses`, carries TCP and UDP to the droplets that pass its health check, follows
//! an update of its droplets, and stops listening the moment it is deleted. The droplets are
//! servers this test runs on 127.0.0.x, each answering with its own name.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use ccm_do_like_simulator::{RunningSimulator, SimulatorConfig};
use ccm_test::eventually;
use ccm_test::net::free_port_on;
use common::{Api, json, send};
use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

const TOKEN: &str = "data-plane-token";
/// The addresses of the droplets' servers.
const DROPLET_A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const DROPLET_B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// A droplet's server: on TCP `port` of `ip` it answers each connection with `name` and
/// closes; on UDP `port` it answers each datagram with `name` + the datagram.
struct Backend {
    tasks: Vec<JoinHandle<()>>,
}

impl Backend {
    async fn start(ip: Ipv4Addr, port: u16, name: &'static str) -> Self {
        let tcp = TcpListener::bind((ip, port)).await.unwrap();
        let udp = UdpSocket::bind((ip, port)).await.unwrap();
        let tcp_task = tokio::spawn(async move {
            while let Ok((mut s, _)) = tcp.accept().await {
                let _ = s.write_all(name.as_bytes()).await;
            }
        });
        let udp_task = tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            while let Ok((n, from)) = udp.recv_from(&mut buf).await {
                let answer = [name.as_bytes(), b":", &buf[..n]].concat();
                let _ = udp.send_to(&answer, from).await;
            }
        });
        Self {
            tasks: vec![tcp_task, udp_task],
        }
    }

    fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

async fn tcp_answer(at: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect(at).await?;
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut answer))
        .await
        .map_err(std::io::Error::other)??;
    Ok(answer)
}

async fn udp_answer(at: SocketAddr, payload: &str) -> Option<String> {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.send_to(payload.as_bytes(), at).await.unwrap();
    let mut buf = [0u8; 1500];
    let (n, _) = tokio::time::timeout(Duration::from_secs(2), s.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn lb_body(droplets: &[u64], port: u16) -> serde_json::Value {
    serde_json::json!({
        "name": "web", "region": "nyc1", "size_unit": 1,
        "forwarding_rules": [
            {"entry_protocol": "tcp", "entry_port": 8080, "target_protocol": "tcp", "target_port": port},
            {"entry_protocol": "udp", "entry_port": 8053, "target_protocol": "udp", "target_port": port},
        ],
        "health_check": {"protocol": "tcp", "port": port, "check_interval_seconds": 3,
            "response_timeout_seconds": 3, "healthy_threshold": 2, "unhealthy_threshold": 2},
        "droplet_ids": droplets,
    })
}

/// A simulator whose load balancers take addresses of `range` (loopback) and activate in
/// 100 ms.
async fn sim_with_data_plane(range: &str) -> RunningSimulator {
    common::start(TOKEN, |cfg| {
        cfg.lb_activation_delay = Duration::from_millis(100);
        cfg.load_balancer_addresses = Some(range.parse().unwrap());
    })
    .await
}

/// A port free for the droplets' servers, a droplet at `ip` in the simulator, and its
/// server answering with `name` at that port.
async fn droplet(
    sim: &RunningSimulator,
    ip: Ipv4Addr,
    port: u16,
    name: &'static str,
) -> (u64, Backend) {
    let backend = Backend::start(ip, port, name).await;
    let droplet = sim
        .handle()
        .create_droplet_at(name, "s-1vcpu-1gb", "nyc1", Some(ip));
    (droplet.id, backend)
}

/// Replaces load balancer `id` through the API; the answer must be a 200.
async fn update_lb(api: &Api, id: &str, body: &serde_json::Value) {
    let path = format!("/v2/load_balancers/{id}");
    let updated = send(api.v2(Method::PUT, &path).json(body)).await;
    assert_eq!(updated.status(), 200);
}

/// Creates a load balancer through the API; its ID.
async fn create_lb(api: &Api, body: &serde_json::Value) -> String {
    let created = json(api.v2(Method::POST, "/v2/load_balancers").json(body)).await;
    created["load_balancer"]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn load_balancers_carry_tcp_and_udp_to_healthy_droplets_until_deleted() {
    let sim = sim_with_data_plane("127.77.1.0/24").await;
    let port = free_port_on(&[DROPLET_A, DROPLET_B]);
    let (da, a) = droplet(&sim, DROPLET_A, port, "a").await;
    let (db, b) = droplet(&sim, DROPLET_B, port, "b").await;
    let h = sim.handle();
    let api = Api::of(&sim, TOKEN);
    let id = create_lb(&api, &lb_body(&[da, db], port)).await;

    // Active with an address of the range; both droplets healthy after their first check.
    let ip = eventually(
        "the load balancer's address",
        Duration::from_secs(5),
        || async {
            let lbs = h.load_balancers();
            let ip = lbs.iter().find(|l| l.id == id).map(|l| l.ip.clone());
            ip.filter(|ip| !ip.is_empty())
                .ok_or_else(|| format!("{lbs:?}"))
        },
    )
    .await;
    let ip: Ipv4Addr = ip.parse().unwrap();
    assert_eq!(ip, Ipv4Addr::new(127, 77, 1, 1));
    eventually("both targets healthy", Duration::from_secs(10), || async {
        let health = h.load_balancer_health(&id);
        if health.iter().filter(|(_, up)| *up).count() == 2 {
            Ok(())
        } else {
            Err(format!("{health:?}"))
        }
    })
    .await;
    let tcp = SocketAddr::from((ip, 8080));
    let udp = SocketAddr::from((ip, 8053));
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(tcp_answer(tcp).await.unwrap());
    }
    seen.sort();
    assert_eq!(seen, ["a", "a", "b", "b"], "round robin over both droplets");
    let answer = udp_answer(udp, "ping").await.expect("a UDP answer");
    assert!(answer == "a:ping" || answer == "b:ping", "{answer}");

    // A droplet that stops answering: before its checks catch up, a connection it refuses
    // goes to the next healthy droplet; then it fails its checks and gets none.
    b.stop();
    for _ in 0..4 {
        assert_eq!(tcp_answer(tcp).await.unwrap(), "a", "retried on a");
    }
    eventually("b unhealthy", Duration::from_secs(15), || async {
        h.load_balancer_health(&id).contains(&(DROPLET_B, false))
    })
    .await;
    for _ in 0..4 {
        assert_eq!(tcp_answer(tcp).await.unwrap(), "a");
    }

    // An update that takes `a` away leaves no healthy droplet: connections are closed at once.
    update_lb(&api, &id, &lb_body(&[db], port)).await;
    eventually("only b is a target", Duration::from_secs(5), || async {
        h.load_balancer_health(&id) == [(DROPLET_B, false)]
    })
    .await;
    assert_eq!(tcp_answer(tcp).await.unwrap_or_default(), "");

    // Deleted: nothing listens on the address any more.
    let deleted = send(api.v2(Method::DELETE, &format!("/v2/load_balancers/{id}"))).await;
    assert_eq!(deleted.status(), 204);
    eventually("the listener closed", Duration::from_secs(2), || async {
        TcpStream::connect(tcp).await.is_err()
    })
    .await;
    a.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn the_firewall_refuses_the_clients_it_does_not_allow() {
    let sim = sim_with_data_plane("127.77.2.0/24").await;
    let port = free_port_on(&[DROPLET_A]);
    let (da, a) = droplet(&sim, DROPLET_A, port, "a").await;
    let h = sim.handle();
    let api = Api::of(&sim, TOKEN);
    let with_firewall = |allow: &[&str]| {
        let mut body = lb_body(&[da], port);
        body["firewall"] = serde_json::json!({"allow": allow});
        body
    };
    let id = create_lb(&api, &with_firewall(&["cidr:10.0.0.0/8"])).await;
    eventually("a healthy target", Duration::from_secs(10), || async {
        h.load_balancer_health(&id).iter().any(|(_, up)| *up)
    })
    .await;
    let tcp = SocketAddr::from(([127, 77, 2, 1], 8080));
    assert_eq!(
        tcp_answer(tcp).await.unwrap_or_default(),
        "",
        "127.0.0.1 is not in 10.0.0.0/8: closed at once"
    );
    assert_eq!(
        udp_answer(SocketAddr::from(([127, 77, 2, 1], 8053)), "x").await,
        None
    );
    update_lb(&api, &id, &with_firewall(&["ip:127.0.0.1"])).await;
    eventually("the client allowed", Duration::from_secs(5), || async {
        tcp_answer(tcp).await.is_ok_and(|a| a == "a")
    })
    .await;
    a.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn addresses_outside_loopback_need_the_non_loopback_switch() {
    let mut cfg = SimulatorConfig::new(TOKEN);
    cfg.load_balancer_addresses = Some("10.88.64.0/24".parse().unwrap());
    let err = RunningSimulator::start(cfg).await.unwrap_err();
    assert!(err.to_string().contains("10.88.64.0/24"), "{err}");
}

/// Two entry ports free on `::1` for TCP and UDP (a dual-stack load balancer listens on the
/// loopback address itself, where fixed ports might be taken).
fn free_ports_on_ipv6_loopback() -> (u16, u16) {
    let tcp = std::net::TcpListener::bind("[::1]:0").unwrap();
    let udp = std::net::UdpSocket::bind("[::1]:0").unwrap();
    let ports = (
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port(),
    );
    drop((tcp, udp));
    ports
}

async fn udp_answer_v6(at: SocketAddr, payload: &str) -> Option<String> {
    let s = UdpSocket::bind("[::1]:0").await.unwrap();
    s.send_to(payload.as_bytes(), at).await.unwrap();
    let mut buf = [0u8; 1500];
    let (n, _) = tokio::time::timeout(Duration::from_secs(2), s.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// A load balancer's `ip` and `ipv6` once it has an IPv4 address.
async fn addresses(sim: &RunningSimulator, id: &str) -> (String, String) {
    eventually(
        "the load balancer's address",
        Duration::from_secs(5),
        || async {
            let lbs = sim.handle().load_balancers();
            let lb = lbs.iter().find(|l| l.id == id).ok_or("gone")?;
            if lb.ip.is_empty() {
                Err(format!("{lb:?}"))
            } else {
                Ok((lb.ip.clone(), lb.ipv6.clone()))
            }
        },
    )
    .await
}

/// A dual-stack load balancer (`network_stack: DUALSTACK`) with `--lb-addresses-v6 ::1/128`:
/// it gets `::1` when it turns active and carries TCP and UDP from IPv6 clients to its
/// droplet's private IPv4 address, as well as from its IPv4 address. Turned back to IPV4 by
/// an update it loses the address and stops listening there; turned dual-stack again while
/// active it gets it back at once; a second dual-stack one finds the range exhausted and is
/// `errored`. ::1/128 rather than an fd00::/8 range: a unique-local
/// range must be routed locally (`ip -6 route add local … dev lo`), which needs a network
/// namespace of the test's own (root); `::1` is on loopback wherever tests run, and one
/// address is all one load balancer needs.
#[tokio::test]
async fn a_dual_stack_load_balancer_carries_ipv6_clients_to_ipv4_droplets() {
    let sim = common::start(TOKEN, |cfg| {
        cfg.lb_activation_delay = Duration::from_millis(100);
        cfg.load_balancer_addresses = Some("127.77.3.0/24".parse().unwrap());
        cfg.load_balancer_addresses_v6 = Some("::1/128".parse().unwrap());
    })
    .await;
    let port = free_port_on(&[DROPLET_A]);
    let (da, a) = droplet(&sim, DROPLET_A, port, "a").await;
    let h = sim.handle();
    let api = Api::of(&sim, TOKEN);
    let (tcp_port, udp_port) = free_ports_on_ipv6_loopback();
    let body = |stack: &str| {
        let mut body = lb_body(&[da], port);
        body["forwarding_rules"][0]["entry_port"] = tcp_port.into();
        body["forwarding_rules"][1]["entry_port"] = udp_port.into();
        body["network_stack"] = stack.into();
        body
    };
    let id = create_lb(&api, &body("DUALSTACK")).await;
    let (ip, ipv6) = addresses(&sim, &id).await;
    assert_eq!(ip, "127.77.3.1");
    assert_eq!(ipv6, "::1", "the range's one address");
    let shown = json(api.v2(Method::GET, &format!("/v2/load_balancers/{id}"))).await;
    assert_eq!(shown["load_balancer"]["network_stack"], "DUALSTACK");
    assert_eq!(shown["load_balancer"]["ipv6"], "::1");
    eventually("a healthy target", Duration::from_secs(10), || async {
        h.load_balancer_health(&id) == [(DROPLET_A, true)]
    })
    .await;
    let tcp6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, tcp_port));
    let udp6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, udp_port));
    assert_eq!(
        tcp_answer(tcp6).await.unwrap(),
        "a",
        "IPv6 client, IPv4 droplet"
    );
    assert_eq!(udp_answer_v6(udp6, "ping").await.as_deref(), Some("a:ping"));
    let tcp4 = SocketAddr::from(([127, 77, 3, 1], tcp_port));
    assert_eq!(tcp_answer(tcp4).await.unwrap(), "a", "and IPv4 clients");

    // Back to IPV4: no IPv6 address, nothing listening on it.
    update_lb(&api, &id, &body("IPV4")).await;
    assert_eq!(
        addresses(&sim, &id).await.1,
        "",
        "the IPv6 address taken at once"
    );
    eventually(
        "the IPv6 listener closed",
        Duration::from_secs(2),
        || async { TcpStream::connect(tcp6).await.is_err() },
    )
    .await;
    assert_eq!(tcp_answer(tcp4).await.unwrap(), "a", "IPv4 untouched");

    // Dual-stack again, while active: the address at once, the listener soon after.
    update_lb(&api, &id, &body("DUALSTACK")).await;
    assert_eq!(addresses(&sim, &id).await.1, "::1");
    eventually("IPv6 carried again", Duration::from_secs(5), || async {
        tcp_answer(tcp6).await.is_ok_and(|a| a == "a")
    })
    .await;
    // An update that names no stack keeps the load balancer's.
    let mut unnamed = body("DUALSTACK");
    unnamed.as_object_mut().unwrap().remove("network_stack");
    update_lb(&api, &id, &unnamed).await;
    assert_eq!(addresses(&sim, &id).await.1, "::1");
    // A second dual-stack load balancer: ::1/128 has no address left for it, so it is
    // `errored`, as an exhausted IPv4 range leaves one; the first keeps its address.
    let mut second = body("DUALSTACK");
    second["name"] = "second".into();
    let second = create_lb(&api, &second).await;
    eventually("the second errored", Duration::from_secs(5), || async {
        let lbs = h.load_balancers();
        let lb = lbs.iter().find(|l| l.id == second).ok_or("gone")?;
        (lb.status == "errored" && lb.ipv6.is_empty())
            .then_some(())
            .ok_or(format!("{lb:?}"))
    })
    .await;
    assert_eq!(addresses(&sim, &id).await.1, "::1");
    assert_eq!(tcp_answer(tcp6).await.unwrap(), "a");
    a.stop();
    sim.shutdown().await;
}

/// What DigitalOcean refuses of `network_stack`, a 422: a value other than IPV4 or
/// DUALSTACK. What it accepts, the simulator accepts too, even where it has no IPv6 path to
/// give (as DigitalOcean's CCM may ask): DUALSTACK on a network load balancer (IPv4
/// passthrough here), or with the data plane on but no IPv6 range; either is active, with
/// its IPv4 address and no `ipv6`.
#[tokio::test]
async fn network_stacks_are_checked_and_dual_stack_without_an_ipv6_path_has_no_ipv6() {
    let sim = sim_with_data_plane("127.77.4.0/24").await;
    let api = Api::of(&sim, TOKEN);
    let with = |stack: &str, network: bool| {
        let mut body = lb_body(&[], 30080);
        body["network_stack"] = stack.into();
        if network {
            body["type"] = "REGIONAL_NETWORK".into();
            body["forwarding_rules"] = serde_json::json!([
                {"entry_protocol": "tcp", "entry_port": 80, "target_protocol": "tcp", "target_port": 80}
            ]);
        }
        body
    };
    for body in [with("dualstack", false), with("IPV6", false)] {
        let resp = send(api.v2(Method::POST, "/v2/load_balancers").json(&body)).await;
        assert_eq!(resp.status(), 422, "{body}");
        let answer: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(answer["id"], "unprocessable_entity");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains("must be IPV4 or DUALSTACK"), "{message}");
    }
    assert!(sim.handle().load_balancers().is_empty());
    for network in [false, true] {
        let id = create_lb(&api, &with("DUALSTACK", network)).await;
        let (ip, ipv6) = addresses(&sim, &id).await;
        assert!(ip.starts_with("127.77.4."), "{ip}");
        assert_eq!(ipv6, "", "network {network}: no IPv6 path");
        let shown = json(api.v2(Method::GET, &format!("/v2/load_balancers/{id}"))).await;
        assert_eq!(shown["load_balancer"]["network_stack"], "DUALSTACK");
        assert_eq!(shown["load_balancer"]["status"], "active");
    }
    sim.shutdown().await;
}

/// Without the data plane, a dual-stack load balancer gets a record address of
/// 2001:db8:1b::/64 (documentation, never bound) and an IPv4 one none.
#[tokio::test]
async fn without_the_data_plane_only_dual_stack_load_balancers_have_an_ipv6_address() {
    let sim = common::start(TOKEN, |cfg| {
        cfg.lb_activation_delay = Duration::ZERO;
    })
    .await;
    let api = Api::of(&sim, TOKEN);
    let mut dual = lb_body(&[], 30080);
    dual["network_stack"] = "DUALSTACK".into();
    let dual = create_lb(&api, &dual).await;
    let plain = create_lb(&api, &lb_body(&[], 30080)).await;
    let (_, v6) = addresses(&sim, &dual).await;
    assert!(v6.starts_with("2001:db8:1b::"), "{v6}");
    assert_eq!(addresses(&sim, &plain).await.1, "");
    let shown = json(api.v2(Method::GET, &format!("/v2/load_balancers/{plain}"))).await;
    assert_eq!(
        shown["load_balancer"]["network_stack"], "IPV4",
        "the default"
    );
    sim.shutdown().await;
}

/// IPv6 load balancer ranges: `::1/128` on loopback; a unique-local one only with the
/// non-loopback switch; never without an IPv4 range.
#[tokio::test]
async fn ipv6_ranges_are_loopback_or_unique_local_with_the_switch() {
    let mut cfg = SimulatorConfig::new(TOKEN);
    cfg.load_balancer_addresses = Some("127.77.5.0/24".parse().unwrap());
    cfg.load_balancer_addresses_v6 = Some("fd00:77::/112".parse().unwrap());
    let err = RunningSimulator::start(cfg.clone()).await.unwrap_err();
    assert!(err.to_string().contains("fd00:77::/112"), "{err}");
    assert!(err.to_string().contains("::1/128"), "{err}");
    cfg.load_balancer_addresses = None;
    cfg.load_balancer_addresses_v6 = Some("::1/128".parse().unwrap());
    let err = RunningSimulator::start(cfg).await.unwrap_err();
    assert!(err.to_string().contains("--lb-addresses"), "{err}");
    let global = "2001:db8::/112".parse::<ccm_do_like_simulator::AddressRangeV6>();
    assert!(global.unwrap_err().contains("unique-local"));
}

/// `POST /admin/droplets` gives a droplet the unique-local IPv6 address it is told (a test
/// cluster's node's), refuses another; `POST /v2/droplets` refuses the attribute.
#[tokio::test]
async fn admin_droplets_take_a_given_unique_local_ipv6_address() {
    let sim = sim_with_data_plane("127.77.6.0/24").await;
    let api = Api::of(&sim, TOKEN);
    let created = json(
        api.request(Method::POST, "/admin/droplets")
            .json(&serde_json::json!({
                "name": "node-1", "private_ip_address": "10.88.0.10", "ipv6_address": "fd00:10::a"
            })),
    )
    .await;
    let v6 = &created["droplet"]["networks"]["v6"];
    assert_eq!(v6.as_array().unwrap().len(), 1, "{v6}");
    assert_eq!(v6[0]["ip_address"], "fd00:10::a");
    assert_eq!(v6[0]["type"], "public");
    assert_eq!(
        sim.handle().droplets()[0].networks.v6[0].ip_address,
        "fd00:10::a"
    );
    let refused = send(
        api.request(Method::POST, "/admin/droplets")
            .json(&serde_json::json!({
                "name": "node-2", "ipv6_address": "2001:db8::a"
            })),
    )
    .await;
    assert_eq!(refused.status(), 422);
    let refused = send(api.v2(Method::POST, "/v2/droplets").json(&serde_json::json!({
        "name": "node-3", "region": "nyc1", "size": "s-1vcpu-1gb", "ipv6_address": "fd00:10::b"
    })))
    .await;
    assert_eq!(refused.status(), 422);
    assert_eq!(sim.handle().droplets().len(), 1);
    sim.shutdown().await;
}
