//! The cluster's DNS: a small authoritative server for `cluster.local` at the cluster
//! namespace's address (port 53, UDP), which every Pod's `resolv.conf` names (the kubelet's
//! `clusterDNS`). It answers `A` queries for `<service>.<namespace>.svc.cluster.local` with
//! the Service's cluster IP, from a watch of the Services; every other name is `NXDOMAIN`
//! and nothing is forwarded, so no look-up ever leaves the machine. No image of CoreDNS can
//! be pulled here, and Kubernetes' e2e specs reach Services by name from Pods.
//!
//! The wire format handled is RFC 1035's: one question, no compression in it; the answer
//! repeats the question and points back to it. Headless Services (no cluster IP), `AAAA`
//! records, Pod and SRV records are not served (`NOERROR` with no answer for a known name).

use std::collections::HashMap;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::{Arc, RwLock};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::runtime::watcher;

use crate::Error;

/// The cluster's DNS domain (the kubelet's `clusterDomain`).
pub(crate) const CLUSTER_DOMAIN: &str = "cluster.local";
/// How long resolvers may cache an answer, in seconds.
const TTL: u32 = 5;
/// The largest query answered (a classic UDP DNS message).
const MAX_QUERY: usize = 512;

const TYPE_A: u16 = 1;
const CLASS_IN: u16 = 1;
const RCODE_NXDOMAIN: u8 = 3;
const RCODE_FORMERR: u8 = 1;
const RCODE_NOTIMP: u8 = 4;

/// Service cluster IPs by `<name>.<namespace>`.
type Records = Arc<RwLock<HashMap<String, Option<Ipv4Addr>>>>;

/// The running server: a thread of its own (with its own runtime, like the pod-network
/// writer, so that it serves whatever the caller's runtime does), stopped when dropped.
#[derive(Debug)]
pub(crate) struct ClusterDns {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ClusterDns {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl ClusterDns {
    /// Serves on `socket` (bound in the cluster's namespace) from a watch of every
    /// Service, with a client made from `config`.
    pub(crate) fn start(config: kube::Config, socket: UdpSocket) -> Result<Self, Error> {
        socket
            .set_nonblocking(true)
            .map_err(|e| Error::io("setting up the DNS socket", e))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("starting the DNS server's runtime", e))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("ccm-test-dns".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let socket = match tokio::net::UdpSocket::from_std(socket) {
                        Ok(socket) => socket,
                        Err(e) => return tracing::warn!(error = %e, "cluster DNS: no socket"),
                    };
                    let client = match kube::Client::try_from(config) {
                        Ok(client) => client,
                        Err(e) => return tracing::warn!(error = %e, "cluster DNS: no client"),
                    };
                    let records = Records::default();
                    tokio::select! {
                        () = watch_services(Api::all(client), Arc::clone(&records)) => {}
                        () = serve(socket, records) => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(|e| Error::io("starting the DNS server", e))?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

async fn watch_services(api: Api<Service>, records: Records) {
    let mut events = watcher(api, watcher::Config::default()).boxed();
    let mut fresh: HashMap<String, Option<Ipv4Addr>> = HashMap::new();
    while let Some(event) = events.next().await {
        let Ok(event) = event else {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            continue;
        };
        match event {
            // A (re)list: its objects replace the records when it is complete.
            watcher::Event::Init => fresh.clear(),
            watcher::Event::InitApply(s) => {
                if let Some((key, ip)) = record(&s) {
                    fresh.insert(key, ip);
                }
            }
            watcher::Event::InitDone => {
                *records.write().unwrap_or_else(|e| e.into_inner()) = std::mem::take(&mut fresh);
            }
            watcher::Event::Apply(s) => {
                if let Some((key, ip)) = record(&s) {
                    records
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key, ip);
                }
            }
            watcher::Event::Delete(s) => {
                if let Some((key, _)) = record(&s) {
                    records
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&key);
                }
            }
        }
    }
}

/// A Service's key (`<name>.<namespace>`) and cluster IP (`None` when headless or not
/// IPv4).
fn record(service: &Service) -> Option<(String, Option<Ipv4Addr>)> {
    let name = service.metadata.name.as_deref()?;
    let namespace = service.metadata.namespace.as_deref()?;
    let ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .and_then(|ip| ip.parse().ok());
    Some((format!("{name}.{namespace}").to_ascii_lowercase(), ip))
}

async fn serve(socket: tokio::net::UdpSocket, records: Records) {
    let mut buf = [0u8; MAX_QUERY];
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let answer = {
            let records = records.read().unwrap_or_else(|e| e.into_inner());
            respond(&buf[..len], |key| records.get(key).copied())
        };
        if let Some(answer) = answer {
            let _ = socket.send_to(&answer, from).await;
        }
    }
}

/// The answer to the DNS message `query`, looking Services up with `lookup` (by
/// `<name>.<namespace>`: `None` for no such Service, `Some(None)` for one without an IPv4
/// cluster IP). `None` for what is not a query at all (too short, or a response).
pub(crate) fn respond(
    query: &[u8],
    lookup: impl Fn(&str) -> Option<Option<Ipv4Addr>>,
) -> Option<Vec<u8>> {
    if query.len() < 12 || query[2] & 0x80 != 0 {
        return None;
    }
    let opcode = (query[2] >> 3) & 0x0f;
    let questions = u16::from_be_bytes([query[4], query[5]]);
    let header = |rcode: u8, answers: u16, question_len: usize| {
        let mut out = Vec::with_capacity(12 + question_len + 16);
        out.extend_from_slice(&query[..2]);
        // QR, the opcode, AA, RD as asked; no recursion available.
        out.push(0x80 | (opcode << 3) | 0x04 | (query[2] & 0x01));
        out.push(rcode);
        out.extend_from_slice(&u16::from(question_len > 0).to_be_bytes());
        out.extend_from_slice(&answers.to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]);
        out
    };
    if opcode != 0 {
        return Some(header(RCODE_NOTIMP, 0, 0));
    }
    let Some((name, end)) = (questions == 1).then(|| parse_name(query, 12)).flatten() else {
        return Some(header(RCODE_FORMERR, 0, 0));
    };
    let Some(fixed) = query.get(end..end + 4) else {
        return Some(header(RCODE_FORMERR, 0, 0));
    };
    let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let qclass = u16::from_be_bytes([fixed[2], fixed[3]]);
    let question = &query[12..end + 4];
    let found = service_key(&name).and_then(|key| lookup(&key));
    let (rcode, address) = match found {
        None => (RCODE_NXDOMAIN, None),
        Some(ip) if qtype == TYPE_A && qclass == CLASS_IN => (0, ip),
        Some(_) => (0, None),
    };
    let mut out = header(rcode, u16::from(address.is_some()), question.len());
    out.extend_from_slice(question);
    if let Some(ip) = address {
        out.extend_from_slice(&[0xc0, 12]); // the question's name
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&ip.octets());
    }
    Some(out)
}

/// The name at `at` (labels, no compression) in lower case without the final dot, and the
/// offset after it.
fn parse_name(message: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = usize::from(*message.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None; // a compression pointer, or not a label
        }
        let label = message.get(at..at + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += len;
        if labels.len() > 127 {
            return None;
        }
    }
    Some((labels.join("."), at))
}

/// `<name>.<namespace>` for `<name>.<namespace>.svc.cluster.local`.
fn service_key(name: &str) -> Option<String> {
    let rest = name.strip_suffix(CLUSTER_DOMAIN)?.strip_suffix(".svc.")?;
    let (service, namespace) = rest.split_once('.')?;
    (!service.is_empty() && !namespace.is_empty() && !namespace.contains('.'))
        .then(|| format!("{service}.{namespace}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&CLASS_IN.to_be_bytes());
        q
    }

    fn lookup(key: &str) -> Option<Option<Ipv4Addr>> {
        match key {
            "web.default" => Some(Some(Ipv4Addr::new(10, 96, 0, 42))),
            "headless.default" => Some(None),
            _ => None,
        }
    }

    #[test]
    fn a_service_name_answers_its_cluster_ip() {
        let q = query("Web.default.svc.cluster.local", TYPE_A);
        let a = respond(&q, lookup).unwrap();
        assert_eq!(&a[..2], &[0xab, 0xcd], "the query's ID");
        assert_eq!(a[2] & 0x80, 0x80, "a response");
        assert_eq!(a[2] & 0x04, 0x04, "authoritative");
        assert_eq!(a[3] & 0x0f, 0, "NOERROR");
        assert_eq!(u16::from_be_bytes([a[6], a[7]]), 1, "one answer");
        assert_eq!(&a[12..q.len()], &q[12..], "the question repeated");
        assert_eq!(&a[a.len() - 4..], &[10, 96, 0, 42]);
    }

    #[test]
    fn other_names_are_nxdomain_and_other_types_are_empty() {
        for name in [
            "missing.default.svc.cluster.local",
            "example.com",
            "web.default.svc.cluster.local.example.com",
            "a.b.default.svc.cluster.local",
        ] {
            let a = respond(&query(name, TYPE_A), lookup).unwrap();
            assert_eq!(a[3] & 0x0f, RCODE_NXDOMAIN, "{name}");
            assert_eq!(u16::from_be_bytes([a[6], a[7]]), 0, "{name}");
        }
        for (name, qtype) in [
            ("web.default.svc.cluster.local", 28),
            ("headless.default.svc.cluster.local", TYPE_A),
        ] {
            let a = respond(&query(name, qtype), lookup).unwrap();
            assert_eq!(a[3] & 0x0f, 0, "{name}: NOERROR");
            assert_eq!(u16::from_be_bytes([a[6], a[7]]), 0, "{name}: no answer");
        }
    }

    #[test]
    fn malformed_messages_get_formerr_or_nothing() {
        assert!(respond(&[0; 5], lookup).is_none(), "too short");
        let mut response = query("web.default.svc.cluster.local", TYPE_A);
        response[2] |= 0x80;
        assert!(respond(&response, lookup).is_none(), "a response");
        let mut truncated = query("web.default.svc.cluster.local", TYPE_A);
        truncated.truncate(20);
        let a = respond(&truncated, lookup).unwrap();
        assert_eq!(a[3] & 0x0f, RCODE_FORMERR);
        let mut pointer = query("web.default.svc.cluster.local", TYPE_A);
        pointer[12] = 0xc0;
        assert_eq!(respond(&pointer, lookup).unwrap()[3] & 0x0f, RCODE_FORMERR);
    }
}
