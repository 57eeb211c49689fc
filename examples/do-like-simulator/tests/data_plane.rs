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
