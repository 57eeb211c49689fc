//! Load balancers shared by several Services, as pure decisions: a Service's sharing key,
//! which members of a group are admitted (and why the others are refused), and the one
//! Service that stands for an admitted group when the provider is called.
//!
//! A group is the Services of one namespace that carry the same key and want a load
//! balancer from this controller. Its members are taken oldest first (creation time, then
//! name): the first configures the load balancer (its spec, its annotations); each later one
//! is admitted when it agrees with the first on everything one load balancer cannot serve
//! two ways and none of its ports (port and protocol) is already taken, until the group is
//! full. The group's Service has every admitted member's ports (each keeps its `nodePort`,
//! so the load balancer sends each port to its own Service) and a UID derived from the
//! cluster, the namespace and the key with SHA-256: the provider's ownership record (a tag
//! from the UID) is the group's, and a key copied into another namespace names another load
//! balancer, which no choice of key can make collide with this one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::controllers::service::failure::cut_message;
use ccm_provider::LOAD_BALANCER_GROUP_ANNOTATION;

/// The annotation that puts a Service in a group sharing one load balancer: Services of one
/// namespace with the same value share it.
pub const SHARING_KEY_ANNOTATION: &str = "ccm-rs.github.io/load-balancer-sharing-key";
/// MetalLB's sharing annotation, read as a sharing key with `--metallb-allow-shared-ip`.
pub const METALLB_SHARING_ANNOTATION: &str = "metallb.universe.tf/allow-shared-ip";
/// Written by the service controller on a member before its ports join the group's load
/// balancer: the key of that group. It says which load balancer to shrink when the member's
/// key changes or goes, even after a restart.
pub const SHARING_KEY_APPLIED_ANNOTATION: &str =
    "ccm-rs.github.io/load-balancer-sharing-key-applied";
/// The longest sharing key (a DNS subdomain's length); a longer one is refused.
pub const MAX_SHARING_KEY_LEN: usize = 253;
/// The most members a group admits; later ones are refused.
pub const MAX_SHARED_MEMBERS: usize = 32;

/// Which annotations hold a sharing key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SharingKeys {
    /// MetalLB's too (ours wins when both are set).
    pub(crate) metallb: bool,
}

/// A group: a namespace and a key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct GroupId {
    pub(crate) namespace: String,
    pub(crate) key: String,
}

impl std::fmt::Display for GroupId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{:?}", self.namespace, self.key)
    }
}

fn annotation<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

impl SharingKeys {
    /// The sharing key `service` asks for: `None` without one, `Err` when it is not a key
    /// (empty, too long, control characters), with why.
    pub(crate) fn key_of<'a>(&self, service: &'a Service) -> Option<Result<&'a str, String>> {
        let key = annotation(service, SHARING_KEY_ANNOTATION).or_else(|| {
            self.metallb
                .then(|| annotation(service, METALLB_SHARING_ANNOTATION))
                .flatten()
        })?;
        Some(validate_key(key).map(|()| key))
    }

    /// The group `service` asks to be in, if any (`Err`: the key is not one).
    pub(crate) fn group_of(&self, service: &Service) -> Option<Result<GroupId, String>> {
        Some(self.key_of(service)?.map(|key| GroupId {
            namespace: service.metadata.namespace.clone().unwrap_or_default(),
            key: key.to_owned(),
        }))
    }
}

/// The group the controller last put `service`'s ports in, by its own annotation.
pub(crate) fn applied_group(service: &Service) -> Option<GroupId> {
    let key = annotation(service, SHARING_KEY_APPLIED_ANNOTATION)?;
    validate_key(key).ok()?;
    Some(GroupId {
        namespace: service.metadata.namespace.clone().unwrap_or_default(),
        key: key.to_owned(),
    })
}

fn validate_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("the sharing key is empty".to_owned());
    }
    if key.len() > MAX_SHARING_KEY_LEN {
        return Err(format!(
            "the sharing key is {} bytes long; at most {MAX_SHARING_KEY_LEN} are allowed",
            key.len()
        ));
    }
    if key.chars().any(char::is_control) {
        return Err("the sharing key holds control characters".to_owned());
    }
    Ok(())
}

/// Whether a member of a group is admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its ports are the group load balancer's.
    Admitted,
    /// Refused, with why (bounded).
    Refused(String),
}

/// The verdict on each of `members` (one group's Services that want a load balancer and
/// are not being deleted, in any order), by index into `members`, in the order members are
/// taken: oldest first. `agreeing` are the annotation prefixes the provider needs members to
/// agree on.
pub(crate) fn admit(
    members: &[&Service],
    agreeing: &[String],
    max_members: usize,
) -> Vec<(usize, Verdict)> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    let at = |s: &Service| s.metadata.creation_timestamp.as_ref().map(|t| t.0);
    order.sort_by(|&a, &b| {
        let (a, b) = (members[a], members[b]);
        at(a)
            .cmp(&at(b))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let mut admitted: Vec<&Service> = Vec::new();
    order
        .into_iter()
        .map(|i| {
            let member = members[i];
            let verdict = match refusal(&admitted, member, agreeing, max_members) {
                None => {
                    admitted.push(member);
                    Verdict::Admitted
                }
                Some(why) => Verdict::Refused(cut_message(why)),
            };
            (i, verdict)
        })
        .collect()
}

/// Why `member` cannot join the `admitted` members, if it cannot.
fn refusal(
    admitted: &[&Service],
    member: &Service,
    agreeing: &[String],
    max_members: usize,
) -> Option<String> {
    let first = admitted.first()?;
    let first_name = first.metadata.name.as_deref().unwrap_or_default();
    if admitted.len() >= max_members {
        return Some(format!(
            "the group already has {max_members} members, the most one load balancer serves"
        ));
    }
    if let Some(field) = disagreeing_field(first, member) {
        return Some(format!(
            "its {field} differs from that of {first_name:?}, the group's first member; one load balancer cannot serve both"
        ));
    }
    if let Some(key) = disagreeing_annotation(first, member, agreeing) {
        return Some(format!(
            "its annotation {key:?} differs from that of {first_name:?}, the group's first member"
        ));
    }
    for port in ports(member) {
        if let Some(owner) = admitted
            .iter()
            .find(|other| ports(other).any(|p| same_port(p, port)))
        {
            return Some(format!(
                "port {}/{} is already {:?}'s",
                port.port,
                protocol(port),
                owner.metadata.name.as_deref().unwrap_or_default()
            ));
        }
    }
    None
}

fn ports(service: &Service) -> impl Iterator<Item = &ServicePort> {
    service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default()
        .iter()
}

fn protocol(port: &ServicePort) -> &str {
    port.protocol.as_deref().unwrap_or("TCP")
}

fn same_port(a: &ServicePort, b: &ServicePort) -> bool {
    a.port == b.port && protocol(a) == protocol(b)
}

/// The ports of `services` as admission tells them apart: (port, protocol).
pub(crate) fn port_keys(services: &[Arc<Service>]) -> BTreeSet<(i32, String)> {
    services
        .iter()
        .flat_map(|s| ports(s))
        .map(|p| (p.port, protocol(p).to_owned()))
        .collect()
}

/// The first spec field (by its API name) in which two members disagree that one load
/// balancer cannot serve two ways. With `externalTrafficPolicy: Local` the health check
/// follows the first member's endpoints, so the selectors must agree too (MetalLB's rule).
fn disagreeing_field(first: &Service, member: &Service) -> Option<&'static str> {
    let default = ServiceSpec::default();
    let a = first.spec.as_ref().unwrap_or(&default);
    let b = member.spec.as_ref().unwrap_or(&default);
    let local = a.external_traffic_policy.as_deref() == Some("Local");
    [
        (
            "externalTrafficPolicy",
            a.external_traffic_policy == b.external_traffic_policy,
        ),
        ("selector", !local || a.selector == b.selector),
        (
            "loadBalancerSourceRanges",
            a.load_balancer_source_ranges == b.load_balancer_source_ranges,
        ),
        ("loadBalancerIP", a.load_balancer_ip == b.load_balancer_ip),
        (
            "loadBalancerClass",
            a.load_balancer_class == b.load_balancer_class,
        ),
        ("ipFamilies", a.ip_families == b.ip_families),
        ("ipFamilyPolicy", a.ip_family_policy == b.ip_family_policy),
        ("sessionAffinity", a.session_affinity == b.session_affinity),
        (
            "sessionAffinityConfig",
            a.session_affinity_config == b.session_affinity_config,
        ),
        (
            "allocateLoadBalancerNodePorts",
            a.allocate_load_balancer_node_ports == b.allocate_load_balancer_node_ports,
        ),
    ]
    .into_iter()
    .find_map(|(field, agree)| (!agree).then_some(field))
}

/// The first annotation under one of the `agreeing` prefixes (or the framework's own
/// backend selector) set differently on the two members.
fn disagreeing_annotation(
    first: &Service,
    member: &Service,
    agreeing: &[String],
) -> Option<String> {
    let empty = BTreeMap::new();
    let a = first.metadata.annotations.as_ref().unwrap_or(&empty);
    let b = member.metadata.annotations.as_ref().unwrap_or(&empty);
    let matters = |key: &str| {
        key == crate::controllers::service::NODE_SELECTOR_ANNOTATION
            || agreeing.iter().any(|p| key.starts_with(p.as_str()))
    };
    a.keys()
        .chain(b.keys())
        .filter(|k| matters(k))
        .find(|k| a.get(*k) != b.get(*k))
        .cloned()
}

/// The Service that stands for `group` when its `admitted` members (oldest first, at least
/// one) are the load balancer's: the first member's spec and annotations (without the
/// sharing annotations), every member's ports, the group annotation, and a name and UID
/// derived from `cluster` and the group.
pub(crate) fn group_service(cluster: &str, group: &GroupId, admitted: &[&Service]) -> Service {
    let digest = group_digest(cluster, group);
    let mut annotations = admitted
        .first()
        .and_then(|s| s.metadata.annotations.clone())
        .unwrap_or_default();
    for ours in [
        SHARING_KEY_ANNOTATION,
        METALLB_SHARING_ANNOTATION,
        SHARING_KEY_APPLIED_ANNOTATION,
    ] {
        annotations.remove(ours);
    }
    annotations.insert(LOAD_BALANCER_GROUP_ANNOTATION.to_owned(), group.key.clone());
    let mut spec = admitted
        .first()
        .and_then(|s| s.spec.clone())
        .unwrap_or_default();
    spec.ports = Some(admitted.iter().flat_map(|s| ports(s).cloned()).collect());
    Service {
        metadata: ObjectMeta {
            name: Some(format!("shared-{}", &digest[..16])),
            namespace: Some(group.namespace.clone()),
            uid: Some(uuid_of(&digest)),
            creation_timestamp: admitted
                .first()
                .and_then(|s| s.metadata.creation_timestamp.clone()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// SHA-256 of the cluster, the namespace and the key (each length-prefixed, so no two
/// triples give the same input), in hex.
fn group_digest(cluster: &str, group: &GroupId) -> String {
    let mut input = Vec::new();
    for part in [cluster, group.namespace.as_str(), group.key.as_str()] {
        input.extend_from_slice(&(part.len() as u64).to_be_bytes());
        input.extend_from_slice(part.as_bytes());
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, &input);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A UUID-shaped UID from a hex digest, with version 8 (custom): never a UID the API server
/// gives (version 4).
fn uuid_of(hex: &str) -> String {
    let mut h: Vec<char> = hex.chars().take(32).collect();
    h[12] = '8';
    format!(
        "{}-{}-{}-{}-{}",
        h[0..8].iter().collect::<String>(),
        h[8..12].iter().collect::<String>(),
        h[12..16].iter().collect::<String>(),
        h[16..20].iter().collect::<String>(),
        h[20..32].iter().collect::<String>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn member(name: &str, age: i64, ports: &[(i32, &str)]) -> Service {
        let mut s = Service::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("ns".into());
        s.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + age).unwrap(),
        ));
        s.metadata.annotations = Some([(SHARING_KEY_ANNOTATION.into(), "k".into())].into());
        s.spec = Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(
                ports
                    .iter()
                    .map(|(port, proto)| ServicePort {
                        port: *port,
                        protocol: Some((*proto).into()),
                        node_port: Some(30000 + port),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        });
        s
    }

    fn verdicts(members: &[&Service]) -> Vec<(String, Verdict)> {
        admit(members, &["example.com/".to_owned()], 3)
            .into_iter()
            .map(|(i, v)| (members[i].metadata.name.clone().unwrap(), v))
            .collect()
    }

    #[test]
    fn keys_come_from_our_annotation_then_metallbs_when_asked() {
        let mut s = member("a", 0, &[]);
        let keys = SharingKeys::default();
        assert_eq!(keys.key_of(&s), Some(Ok("k")));
        s.metadata.annotations = Some([(METALLB_SHARING_ANNOTATION.into(), "m".into())].into());
        assert_eq!(keys.key_of(&s), None, "MetalLB's only with the flag");
        let metallb = SharingKeys { metallb: true };
        assert_eq!(metallb.key_of(&s), Some(Ok("m")));
        s.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(SHARING_KEY_ANNOTATION.into(), "ours".into());
        assert_eq!(metallb.key_of(&s), Some(Ok("ours")));
        let group = metallb.group_of(&s).unwrap().unwrap();
        assert_eq!(
            (group.namespace.as_str(), group.key.as_str()),
            ("ns", "ours")
        );
    }

    #[test]
    fn bad_keys_are_refused_with_why() {
        let mut s = member("a", 0, &[]);
        for (key, why) in [
            (String::new(), "empty"),
            ("x".repeat(10 * 1024), "10240 bytes long"),
            ("a\nb".to_owned(), "control characters"),
        ] {
            s.metadata.annotations = Some([(SHARING_KEY_ANNOTATION.into(), key)].into());
            let err = SharingKeys::default().key_of(&s).unwrap().unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn members_are_taken_oldest_first_and_overlapping_ports_refused() {
        let a = member("a", 0, &[(80, "TCP")]);
        let b = member("b", 1, &[(8080, "TCP"), (53, "UDP")]);
        let c = member("c", 2, &[(80, "TCP")]);
        let d = member("d", 3, &[(80, "UDP")]);
        let v = verdicts(&[&d, &c, &b, &a]);
        assert_eq!(v[0], ("a".into(), Verdict::Admitted));
        assert_eq!(v[1], ("b".into(), Verdict::Admitted));
        assert_eq!(
            v[2],
            (
                "c".into(),
                Verdict::Refused("port 80/TCP is already \"a\"'s".into())
            )
        );
        assert_eq!(
            v[3],
            ("d".into(), Verdict::Admitted),
            "UDP 80 is another port"
        );
    }

    #[test]
    fn members_must_agree_on_what_one_load_balancer_cannot_serve_two_ways() {
        let a = member("a", 0, &[(80, "TCP")]);
        let mut b = member("b", 1, &[(81, "TCP")]);
        b.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
        let mut c = member("c", 2, &[(82, "TCP")]);
        c.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("example.com/size".into(), "big".into());
        let mut d = member("d", 3, &[(83, "TCP")]);
        d.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("other.io/note".into(), "anything".into());
        let v = verdicts(&[&a, &b, &c, &d]);
        assert!(matches!(&v[1].1, Verdict::Refused(w) if w.contains("externalTrafficPolicy")));
        assert!(matches!(&v[2].1, Verdict::Refused(w) if w.contains("example.com/size")));
        assert_eq!(v[3].1, Verdict::Admitted, "other annotations may differ");
    }

    #[test]
    fn local_members_need_the_same_selector() {
        let local = |name, age, port, app: &str| {
            let mut s = member(name, age, &[(port, "TCP")]);
            let spec = s.spec.as_mut().unwrap();
            spec.external_traffic_policy = Some("Local".into());
            spec.selector = Some([("app".into(), app.into())].into());
            s
        };
        let (a, b, c) = (
            local("a", 0, 80, "x"),
            local("b", 1, 81, "x"),
            local("c", 2, 82, "y"),
        );
        let v = verdicts(&[&a, &b, &c]);
        assert_eq!(v[1].1, Verdict::Admitted);
        assert!(matches!(&v[2].1, Verdict::Refused(w) if w.contains("selector")));
    }

    #[test]
    fn a_full_group_refuses_the_rest() {
        let members: Vec<Service> = (0..5)
            .map(|i| member(&format!("m{i}"), i64::from(i), &[(80 + i, "TCP")]))
            .collect();
        let refs: Vec<&Service> = members.iter().collect();
        let v = verdicts(&refs);
        assert_eq!(v.iter().filter(|(_, v)| *v == Verdict::Admitted).count(), 3);
        assert!(matches!(&v[4].1, Verdict::Refused(w) if w.contains("already has 3 members")));
    }

    #[test]
    fn the_group_service_has_every_port_and_an_identity_of_its_own() {
        let a = member("a", 0, &[(80, "TCP")]);
        let b = member("b", 1, &[(8080, "TCP")]);
        let group = GroupId {
            namespace: "ns".into(),
            key: "k".into(),
        };
        let svc = group_service("c1", &group, &[&a, &b]);
        let ports: Vec<(i32, Option<i32>)> = svc
            .spec
            .as_ref()
            .unwrap()
            .ports
            .iter()
            .flatten()
            .map(|p| (p.port, p.node_port))
            .collect();
        assert_eq!(ports, [(80, Some(30080)), (8080, Some(38080))]);
        assert_eq!(ccm_provider::load_balancer_group(&svc), Some("k"));
        let annotations = svc.metadata.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key(SHARING_KEY_ANNOTATION));
        let uid = svc.metadata.uid.clone().unwrap();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "8", "version 8: never an API server's UID");
        // The same group, members or not, has the same identity; another namespace, key or
        // cluster another.
        assert_eq!(
            group_service("c1", &group, &[&b]).metadata.uid,
            Some(uid.clone())
        );
        let other_ns = GroupId {
            namespace: "ns2".into(),
            key: "k".into(),
        };
        assert_ne!(
            group_service("c1", &other_ns, &[&a]).metadata.uid,
            Some(uid.clone())
        );
        assert_ne!(group_service("c2", &group, &[&a]).metadata.uid, Some(uid));
        // Length prefixes: ("ab", "c") and ("a", "bc") differ.
        let split = |ns: &str, key: &str| {
            group_digest(
                "c",
                &GroupId {
                    namespace: ns.into(),
                    key: key.into(),
                },
            )
        };
        assert_ne!(split("ab", "c"), split("a", "bc"));
    }

    #[test]
    fn the_applied_group_is_read_back() {
        let mut s = member("a", 0, &[]);
        assert_eq!(applied_group(&s), None);
        s.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(SHARING_KEY_APPLIED_ANNOTATION.into(), "k".into());
        assert_eq!(
            applied_group(&s),
            Some(GroupId {
                namespace: "ns".into(),
                key: "k".into()
            })
        );
    }
}
