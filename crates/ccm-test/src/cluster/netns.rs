//! The cluster's network: namespaces that processes of the run hold (so the kernel removes
//! them, with their interfaces, routes, firewall rules and mounts, when those processes
//! end), one bridge joining the nodes, and the ways in from this process: a connection made
//! by a thread that joins the namespace, and a loopback port forwarded to an address inside.

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::Error;

/// The bridge in the cluster's namespace that every node's `eth0` is plugged into.
pub(crate) const BRIDGE: &str = "ccm0";
/// The cluster namespace's address on the bridge: kube-apiserver's, and the nodes' gateway.
pub(crate) const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 1);
/// The prefix length of the nodes' network, `10.88.0.0/24`.
pub(crate) const PREFIX_LEN: u8 = 24;
/// Addresses local to the cluster namespace without being on an interface: a process there
/// may bind any of them (a cloud's load balancers), and the nodes reach them through their
/// default route.
pub const LOAD_BALANCER_CIDR: &str = "10.88.64.0/24";
/// The cluster namespace's IPv6 address on the bridge, in a dual-stack cluster: the nodes'
/// IPv6 gateway. Unique-local (`fd00::/8`), as every IPv6 address of the cluster is.
pub(crate) const GATEWAY_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0x88, 0, 0, 0, 0, 1);
/// The prefix length of the nodes' IPv6 network, `fd00:10:88::/64`.
pub(crate) const PREFIX_LEN_V6: u8 = 64;
/// The IPv6 counterpart of [`LOAD_BALANCER_CIDR`] in a dual-stack cluster: local to the
/// cluster namespace, for a cloud's load balancers' IPv6 addresses.
pub const LOAD_BALANCER_CIDR_V6: &str = "fd00:10:88:64::/112";
/// How long a connection into a namespace may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The address of the node with this index (0 is the first node): `10.88.0.10` onwards.
pub(crate) fn node_address(index: usize) -> Option<Ipv4Addr> {
    let last = 10usize.checked_add(index).filter(|&last| last < 255)?;
    Some(Ipv4Addr::new(10, 88, 0, u8::try_from(last).ok()?))
}

/// The IPv6 address of the node with this index in a dual-stack cluster: the same last
/// number as its IPv4 address ([`node_address`]) in `fd00:10:88::/64`.
pub(crate) fn node_address_v6(index: usize) -> Option<Ipv6Addr> {
    let last = node_address(index)?.octets()[3];
    Some(Ipv6Addr::new(
        0xfd00,
        0x10,
        0x88,
        0,
        0,
        0,
        0,
        u16::from(last),
    ))
}

/// What a namespace's holder runs: `unshare` makes the namespaces and `exec`s this script,
/// which (for a node) names the node's host (its own UTS namespace: `hostNetwork` Pods see
/// the node's name, as on a machine of its own), makes the mount namespace's propagation
/// shared, so that containerd's
/// own mount namespace below it sees the kubelet's volume mounts, and mounts a tmpfs over
/// each folder that containerd, the CNI plugins and the kubelet write to at fixed host
/// paths, so that none of it reaches the host and all of it goes with the namespace. Then
/// it writes its PID to `$1` and sleeps until it is stopped.
const HOLDER_SCRIPT: &str = r#"
set -e
if [ "$2" = node ]; then
    hostname "$3"
    mount --make-rshared /
    for d in /run/netns /run/containerd /var/lib/cni /var/log/pods /var/log/containers; do
        mkdir -p "$d"
        mount -t tmpfs -o mode=0755 ccm-test "$d"
    done
fi
echo $$ >"$1.tmp"
mv "$1.tmp" "$1"
exec sleep infinity
"#;

/// The file name of [`HOLDER_SCRIPT`] in the cluster's folder.
pub(crate) const HOLDER_SCRIPT_FILE: &str = "holder.sh";

/// Writes the holder's script into the cluster's folder `dir`.
pub(crate) fn write_holder_script(dir: &Path) -> Result<(), Error> {
    crate::write_file(&dir.join(HOLDER_SCRIPT_FILE), HOLDER_SCRIPT)
}

/// The command of a namespace holder: a new network namespace (and, for the node `node`,
/// a UTS namespace and a private mount namespace), held by a process that writes its PID to
/// `ready` when set up. The script is the one [`write_holder_script`] put in `dir`.
pub(crate) fn holder_command(
    dir: &Path,
    ready: &Path,
    node: Option<&str>,
) -> Result<(PathBuf, Vec<String>), Error> {
    let ready = path_arg(ready)?;
    let mut args = vec!["--net".to_owned()];
    if node.is_some() {
        args.extend(["--uts", "--mount", "--propagation", "private"].map(str::to_owned));
    }
    args.extend(["--".to_owned(), "sh".to_owned()]);
    args.push(path_arg(&dir.join(HOLDER_SCRIPT_FILE))?);
    args.push(ready);
    match node {
        Some(name) => args.extend(["node".to_owned(), name.to_owned()]),
        None => args.push("cluster".to_owned()),
    }
    Ok((PathBuf::from("unshare"), args))
}

/// A namespace held by a process of the run: its PID (for `nsenter`) and an open handle on
/// its network namespace (for threads that join it).
#[derive(Debug)]
pub(crate) struct NetworkNamespace {
    name: String,
    pid: u32,
    net: File,
}

impl NetworkNamespace {
    /// The namespaces of the holder process `pid`, called `name` in messages.
    pub(crate) fn of_process(name: &str, pid: u32) -> Result<Self, Error> {
        let path = format!("/proc/{pid}/ns/net");
        let net = File::open(&path).map_err(|e| Error::io(format!("opening {path}"), e))?;
        Ok(Self {
            name: name.to_owned(),
            pid,
            net,
        })
    }

    /// The PID of the process that holds the namespace.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The program and arguments that run `program args` in this network namespace and,
    /// with `mount` (a node's), in its holder's mount and UTS namespaces too.
    pub(crate) fn command(
        &self,
        mount: bool,
        program: &Path,
        args: Vec<String>,
    ) -> (PathBuf, Vec<String>) {
        let mut all = vec![
            "--target".to_owned(),
            self.pid.to_string(),
            "--net".to_owned(),
        ];
        if mount {
            all.extend(["--mount".to_owned(), "--uts".to_owned()]);
        }
        all.push("--".to_owned());
        all.push(program.display().to_string());
        all.extend(args);
        (PathBuf::from("nsenter"), all)
    }

    /// Runs the shell script `script` (`sh -ec`) in this network namespace and waits for it.
    ///
    /// # Errors
    ///
    /// When it cannot start or fails; the message has its standard error.
    pub(crate) fn run_script(&self, script: &str) -> Result<String, Error> {
        let (program, args) = self.command(
            false,
            Path::new("sh"),
            vec!["-ec".to_owned(), script.to_owned()],
        );
        run(
            Command::new(program).args(args),
            &format!("in {}", self.name),
        )
    }

    /// A connection to `address` made from inside this network namespace, without blocking
    /// the runtime.
    pub(crate) async fn connect(&self, address: SocketAddr) -> io::Result<tokio::net::TcpStream> {
        let net = self.net.try_clone()?;
        let stream = tokio::task::spawn_blocking(move || connect_in(&net, address))
            .await
            .map_err(io::Error::other)??;
        stream.set_nonblocking(true)?;
        tokio::net::TcpStream::from_std(stream)
    }
}

impl NetworkNamespace {
    /// A UDP socket bound to `address` inside this network namespace.
    pub(crate) fn bind_udp(&self, address: SocketAddr) -> io::Result<std::net::UdpSocket> {
        in_namespace(&self.net, move || std::net::UdpSocket::bind(address))
    }
}

/// Runs `make` on a new thread that joins the network namespace `net`: a socket belongs to
/// the namespace it was made in, whatever thread uses it later.
fn in_namespace<T: Send + 'static>(
    net: &File,
    make: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let net = net.try_clone()?;
    std::thread::Builder::new()
        .name("ccm-test-netns".to_owned())
        .spawn(move || {
            rustix::thread::move_into_link_name_space(
                net.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )?;
            make()
        })?
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// Connects to `address` from inside the network namespace `net`.
fn connect_in(net: &File, address: SocketAddr) -> io::Result<TcpStream> {
    in_namespace(net, move || {
        TcpStream::connect_timeout(&address, CONNECT_TIMEOUT)
    })
}

/// A loopback port of this process's network namespace forwarded to an address inside a
/// cluster's: each connection accepted on it is joined to a new connection made inside.
/// Dropping it stops accepting; open connections end when either side closes.
#[derive(Debug)]
pub(crate) struct Forwarder {
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Listens on a free port of `127.0.0.1` and forwards to `target` in `namespace`.
    pub(crate) fn start(namespace: Arc<NetworkNamespace>, target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name(format!("ccm-test-forward-{}", local.port()))
            .spawn({
                let stop = stop.clone();
                move || accept_loop(&listener, &namespace, target, &stop)
            })?;
        Ok(Self {
            local,
            stop,
            thread: Some(thread),
        })
    }

    /// The loopback address to connect to.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn accept_loop(
    listener: &TcpListener,
    namespace: &NetworkNamespace,
    target: SocketAddr,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                let Ok(net) = namespace.net.try_clone() else {
                    continue;
                };
                let _ = std::thread::Builder::new()
                    .name("ccm-test-forward-conn".to_owned())
                    .spawn(move || {
                        if client.set_nonblocking(false).is_err() {
                            return;
                        }
                        match connect_in(&net, target) {
                            Ok(upstream) => splice(client, upstream),
                            Err(e) => {
                                tracing::debug!(%target, error = %e, "forwarding: cannot connect");
                            }
                        }
                    });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                tracing::debug!(error = %e, "forwarding: accept failed");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Copies both ways until each side has finished sending.
fn splice(client: TcpStream, upstream: TcpStream) {
    let (Ok(mut client_read), Ok(mut upstream_read)) = (client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    let (mut client_write, mut upstream_write) = (client, upstream);
    let up = std::thread::Builder::new()
        .name("ccm-test-forward-up".to_owned())
        .spawn(move || {
            let _ = io::copy(&mut client_read, &mut upstream_write);
            let _ = upstream_write.shutdown(Shutdown::Write);
        });
    let _ = io::copy(&mut upstream_read, &mut client_write);
    let _ = client_write.shutdown(Shutdown::Write);
    if let Ok(up) = up {
        let _ = up.join();
    }
}

/// Runs a command and returns its standard output; an error quotes its standard error.
pub(crate) fn run(command: &mut Command, what: &str) -> Result<String, Error> {
    let output = command
        .output()
        .map_err(|e| Error::io(format!("running {:?} {what}", command.get_program()), e))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(Error::Cluster(format!(
            "{:?} {what} failed ({}): {}",
            command.get_program(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// The script that sets up the cluster namespace: loopback, the bridge with the gateway
/// address, forwarding (the namespace routes between the nodes' pod networks), and the
/// load-balancer range as local addresses (`ip route add local`, so that binding one needs
/// no address added first), and equal-cost routes spread by flow (source and destination
/// ports too), for load balancers that route their address to several nodes.
/// With `dual_stack`, the same for IPv6 ([`GATEWAY_V6`], [`LOAD_BALANCER_CIDR_V6`]; no
/// duplicate address detection, which would keep the address unusable for a second), and
/// `ip_nonlocal_bind`: unlike IPv4, Linux binds an IPv6 address of a local route only with
/// it.
pub(crate) fn cluster_setup_script(dual_stack: bool) -> String {
    let mut script = format!(
        "ip link set lo up
ip link add {BRIDGE} type bridge
ip addr add {GATEWAY}/{PREFIX_LEN} dev {BRIDGE}
ip link set {BRIDGE} up
echo 1 >/proc/sys/net/ipv4/ip_forward
ip route add local {LOAD_BALANCER_CIDR} dev lo
echo 1 >/proc/sys/net/ipv4/fib_multipath_hash_policy
"
    );
    if dual_stack {
        script += &format!(
            "ip -6 addr add {GATEWAY_V6}/{PREFIX_LEN_V6} dev {BRIDGE} nodad
echo 1 >/proc/sys/net/ipv6/conf/all/forwarding
ip -6 route add local {LOAD_BALANCER_CIDR_V6} dev lo
echo 1 >/proc/sys/net/ipv6/ip_nonlocal_bind
echo 1 >/proc/sys/net/ipv6/fib_multipath_hash_policy
"
        );
    }
    script
}

/// The script, run in the cluster namespace, that plugs a node in: a veth pair whose node
/// end is the node's `eth0` (moved into the namespace of the holder `node_pid`).
pub(crate) fn attach_script(index: usize, node_pid: u32) -> String {
    format!(
        "ip link add n{index} type veth peer name eth0 netns {node_pid}
ip link set n{index} master {BRIDGE} up
"
    )
}

/// The script, run in a node's namespace, that gives it its address and the default route,
/// and lets it route for its Pods; bridged Pod traffic goes through iptables, as
/// kube-proxy needs (`br_netfilter`, when the kernel has it).
/// With an IPv6 `address_v6` (a dual-stack cluster), the same for IPv6.
pub(crate) fn node_setup_script(address: Ipv4Addr, address_v6: Option<Ipv6Addr>) -> String {
    let mut script = format!(
        "ip link set lo up
ip addr add {address}/{PREFIX_LEN} dev eth0
ip link set eth0 up
ip route add default via {GATEWAY}
echo 1 >/proc/sys/net/ipv4/ip_forward
if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
fi
"
    );
    if let Some(v6) = address_v6 {
        script += &format!(
            "ip -6 addr add {v6}/{PREFIX_LEN_V6} dev eth0 nodad
ip -6 route add default via {GATEWAY_V6}
echo 1 >/proc/sys/net/ipv6/conf/all/forwarding
if [ -e /proc/sys/net/bridge/bridge-nf-call-ip6tables ]; then
    echo 1 >/proc/sys/net/bridge/bridge-nf-call-ip6tables
fi
"
        );
    }
    script
}

/// The script, run in the cluster namespace, that routes a node's pod CIDR to the node.
/// An IPv6 pod CIDR goes to the node's IPv6 address.
pub(crate) fn pod_route_script(pod_cidr: &str, node: IpAddr) -> Result<String, Error> {
    match node {
        IpAddr::V4(_) => validate_ipv4_cidr(pod_cidr)?,
        IpAddr::V6(_) => validate_ipv6_cidr(pod_cidr)?,
    }
    Ok(format!("ip route replace {pod_cidr} via {node}\n"))
}

/// Accepts `a:b::/n` only (it goes into a shell script).
pub(crate) fn validate_ipv6_cidr(cidr: &str) -> Result<(), Error> {
    let valid = cidr.split_once('/').is_some_and(|(ip, len)| {
        ip.parse::<Ipv6Addr>().is_ok() && len.parse::<u8>().is_ok_and(|len| len <= 128)
    });
    if valid {
        Ok(())
    } else {
        Err(Error::Cluster(format!("{cidr:?} is not an IPv6 CIDR")))
    }
}

/// Accepts `a.b.c.d/n` only (it goes into a shell script).
pub(crate) fn validate_ipv4_cidr(cidr: &str) -> Result<(), Error> {
    let valid = cidr.split_once('/').is_some_and(|(ip, len)| {
        ip.parse::<Ipv4Addr>().is_ok() && len.parse::<u8>().is_ok_and(|len| len <= 32)
    });
    if valid {
        Ok(())
    } else {
        Err(Error::Cluster(format!("{cidr:?} is not an IPv4 CIDR")))
    }
}

fn path_arg(path: &Path) -> Result<String, Error> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::InvalidArgument(format!("{} is not UTF-8", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_addresses_stay_in_the_nodes_network() {
        assert_eq!(node_address(0), Some(Ipv4Addr::new(10, 88, 0, 10)));
        assert_eq!(node_address(244), Some(Ipv4Addr::new(10, 88, 0, 254)));
        assert_eq!(node_address(245), None);
        assert_eq!(node_address(usize::MAX), None);
    }

    #[test]
    fn only_ipv4_cidrs_reach_a_script() {
        assert!(validate_ipv4_cidr("10.244.1.0/24").is_ok());
        for bad in [
            "10.244.1.0",
            "10.244.1.0/33",
            "fd00::/64",
            "1.2.3.4/8; rm -rf /",
            "",
        ] {
            assert!(validate_ipv4_cidr(bad).is_err(), "{bad}");
        }
        let node = IpAddr::V4(Ipv4Addr::new(10, 88, 0, 11));
        assert_eq!(
            pod_route_script("10.244.1.0/24", node).unwrap(),
            "ip route replace 10.244.1.0/24 via 10.88.0.11\n"
        );
        let node_v6 = IpAddr::V6(node_address_v6(1).unwrap());
        assert_eq!(
            pod_route_script("fd00:10:244:1::/64", node_v6).unwrap(),
            "ip route replace fd00:10:244:1::/64 via fd00:10:88::b\n"
        );
        assert!(pod_route_script("fd00:10:244:1::/64", node).is_err());
        assert!(pod_route_script("10.244.1.0/24", node_v6).is_err());
        for bad in ["fd00::", "fd00::/129", "10.0.0.0/8", "fd00::/64; reboot"] {
            assert!(validate_ipv6_cidr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn commands_enter_the_holders_namespaces() {
        let dir = Path::new("/tmp/x");
        let (program, args) =
            holder_command(dir, &dir.join("node.ready"), Some("ccm-worker")).unwrap();
        assert_eq!(program, Path::new("unshare"));
        assert_eq!(
            &args[..6],
            [
                "--net",
                "--uts",
                "--mount",
                "--propagation",
                "private",
                "--"
            ]
        );
        assert_eq!(&args[args.len() - 2..], ["node", "ccm-worker"]);
        assert_eq!(args[7], "/tmp/x/holder.sh");
        let (_, args) = holder_command(dir, &dir.join("cluster.ready"), None).unwrap();
        assert_eq!(&args[..4], ["--net", "--", "sh", "/tmp/x/holder.sh"]);
    }
}
