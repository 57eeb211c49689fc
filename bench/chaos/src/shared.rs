//! The `shared` experiment: groups of Services sharing one load balancer
//! (`ccm-rs.github.io/load-balancer-sharing-key`) are churned — members join (created, a
//! type changed back to `LoadBalancer`, a key added), leave (deleted, type changed away,
//! key removed or changed) and conflict (a port another member already has) — while the CCM
//! is SIGKILLed and restarted and the cloud answers 5xx and 429. Then, once quiet, the
//! state is checked against what the groups must be, computed here independently of the
//! framework (oldest member first, a port taken refuses the newcomer):
//!
//! - every load balancer belongs to a group with at least one admitted member, or to a
//!   live Service of its own (orphans), and none twice (duplicates);
//! - no Service hangs on its finalizer (deleted, or no longer of type `LoadBalancer`);
//! - every admitted member's ingress is its group's load balancer's address, a refused one
//!   that of the load balancer of its own it had before it asked to share, or none (a
//!   refusal loses nothing); every admitted member holds the finalizer and the `…-sharing-key-applied`
//!   annotation naming its key, and no other Service carries that annotation;
//! - each group's load balancer forwards exactly the union of its admitted members' ports
//!   (port → that member's `nodePort`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use ccm_core::provider::default_load_balancer_name;
use ccm_core::well_known::FINALIZER_LOAD_BALANCER_CLEANUP;
use ccm_do_like_simulator::Faults;
use ccm_test::process::Signal;
use k8s_openapi::api::core::v1::{Event, Namespace, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

use super::{CLUSTER, Cluster, LOG_TAIL, Options, Outcome, Result, Rng};

/// The annotation naming a Service's group.
const KEY: &str = "ccm-rs.github.io/load-balancer-sharing-key";
/// Written by the controller on a member whose ports are in its group's load balancer.
const KEY_APPLIED: &str = "ccm-rs.github.io/load-balancer-sharing-key-applied";
/// The namespaces of the experiment (`shared-0`, …): the same keys in each, other groups.
const NAMESPACES: usize = 3;
/// The keys used in each namespace.
const KEYS: [&str; 3] = ["web", "api", "edge"];
/// The ports a member picks from: few, so members of a group often want the same one.
const PORTS: [i32; 5] = [80, 443, 8080, 8443, 9000];

/// What the experiment did, and what it found beyond the common counts.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shared {
    /// Groups (namespace, key) that had a member at some point.
    pub(crate) groups: usize,
    /// Churn operations by kind.
    pub(crate) ops: BTreeMap<&'static str, usize>,
    /// `LoadBalancerSharingRefused` Warnings the CCM reported over the run (each Event's
    /// count): the conflicts it saw.
    pub(crate) refusals: i64,
    /// Members admitted and refused at the end (by the independent computation).
    pub(crate) admitted: usize,
    pub(crate) refused: usize,
    /// Admitted members whose ingress is not their group's address, refused ones with one.
    pub(crate) wrong_ingress: usize,
    /// Load balancers whose ports are not their members' (or their Service's).
    pub(crate) wrong_ports: usize,
    /// Admitted members without the finalizer or the applied annotation; others with it.
    pub(crate) wrong_members: usize,
    /// The first few mismatches, for the report.
    pub(crate) problems: Vec<String>,
}

impl Shared {
    pub(crate) fn clean(&self) -> bool {
        self.wrong_ingress == 0 && self.wrong_ports == 0 && self.wrong_members == 0
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "groups": self.groups,
            "churn_ops": self.ops.values().sum::<usize>(),
            "ops": self.ops,
            "refusals": self.refusals,
            "admitted": self.admitted,
            "refused": self.refused,
            "wrong_ingress": self.wrong_ingress,
            "wrong_ports": self.wrong_ports,
            "wrong_members": self.wrong_members,
            "problems": self.problems,
        })
    }

    fn problem(&mut self, what: String) {
        if self.problems.len() < 10 {
            self.problems.push(what);
        }
    }
}

/// The name of the load balancer of group `key` in `namespace`, as the framework derives
/// it: the provider's default name of a Service whose UID is SHA-256 of the cluster, the
/// namespace and the key (each length-prefixed), UUID-shaped with version 8.
pub(crate) fn group_lb_name(cluster: &str, namespace: &str, key: &str) -> String {
    let mut input = Vec::new();
    for part in [cluster, namespace, key] {
        input.extend_from_slice(&(part.len() as u64).to_be_bytes());
        input.extend_from_slice(part.as_bytes());
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, &input);
    let mut hex: Vec<char> = digest
        .as_ref()
        .iter()
        .flat_map(|b| format!("{b:02x}").chars().collect::<Vec<_>>())
        .take(32)
        .collect();
    hex[12] = '8';
    let uid: String = hex.into_iter().collect();
    let mut svc = Service::default();
    svc.metadata.uid = Some(format!(
        "{}-{}-{}-{}-{}",
        &uid[0..8],
        &uid[8..12],
        &uid[12..16],
        &uid[16..20],
        &uid[20..32]
    ));
    default_load_balancer_name(&svc)
}

/// A Service of the experiment as the churn last left it.
#[derive(Clone, Debug)]
struct Member {
    key: Option<&'static str>,
    load_balancer: bool,
}

fn annotation<'a>(svc: &'a Service, key: &str) -> Option<&'a str> {
    svc.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn has_finalizer(svc: &Service) -> bool {
    svc.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER_LOAD_BALANCER_CLEANUP)
}

fn is_load_balancer(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

fn ingress_ips(svc: &Service) -> BTreeSet<String> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .map(|i| {
            i.ip.clone()
                .or_else(|| i.hostname.clone())
                .unwrap_or_default()
        })
        .collect()
}

/// `(port, protocol, nodePort)` of each of `svc`'s ports.
fn ports(svc: &Service) -> Vec<(i32, String, i32)> {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p.port,
                p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                p.node_port.unwrap_or_default(),
            )
        })
        .collect()
}

/// `(entry port, target port)` of a load balancer's rules, or of Services' ports.
type Rules = BTreeSet<(i64, i64)>;

fn rules_of(services: &[&Service]) -> Rules {
    services
        .iter()
        .flat_map(|s| ports(s))
        .map(|(port, _, node_port)| (i64::from(port), i64::from(node_port)))
        .collect()
}

fn name_of(svc: &Service) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The state now, against what the groups must be. True when nothing is wrong.
async fn inspect(cluster: &Cluster, outcome: &mut Outcome, shared: &mut Shared) -> Result<bool> {
    let all: Api<Service> = Api::all(cluster.cp.client()?);
    let services: Vec<Service> = all
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|s| {
            s.metadata
                .namespace
                .as_deref()
                .is_some_and(|n| n.starts_with("shared-"))
        })
        .collect();
    let lbs = cluster.sim.handle().load_balancers();
    let mut by_name: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for lb in &lbs {
        by_name.entry(lb.name.clone()).or_default().push(lb);
    }
    shared.admitted = 0;
    shared.refused = 0;
    shared.wrong_ingress = 0;
    shared.wrong_ports = 0;
    shared.wrong_members = 0;
    shared.problems.clear();
    let mut stuck = 0;
    let mut missing = 0;
    // Load balancer name → who it is for, and the Services whose ports it must have.
    let mut wanted: BTreeMap<String, (String, Vec<&Service>)> = BTreeMap::new();
    let mut groups: BTreeMap<(String, String), Vec<&Service>> = BTreeMap::new();
    for svc in &services {
        if svc.metadata.deletion_timestamp.is_some() {
            stuck += 1;
            shared.problem(format!("{} deleted, held by its finalizer", name_of(svc)));
            continue;
        }
        if !is_load_balancer(svc) {
            if has_finalizer(svc) {
                stuck += 1;
                shared.problem(format!(
                    "{} is no LoadBalancer and holds the finalizer",
                    name_of(svc)
                ));
            }
            if annotation(svc, KEY_APPLIED).is_some() {
                shared.wrong_members += 1;
                shared.problem(format!(
                    "{} is no LoadBalancer and carries {KEY_APPLIED}",
                    name_of(svc)
                ));
            }
            continue;
        }
        let namespace = svc.metadata.namespace.clone().unwrap_or_default();
        match annotation(svc, KEY) {
            Some(key) => groups
                .entry((namespace, key.to_owned()))
                .or_default()
                .push(svc),
            None => {
                if annotation(svc, KEY_APPLIED).is_some() {
                    shared.wrong_members += 1;
                    shared.problem(format!(
                        "{} has no key and carries {KEY_APPLIED}",
                        name_of(svc)
                    ));
                }
                wanted.insert(default_load_balancer_name(svc), (name_of(svc), vec![svc]));
            }
        }
    }
    let mut admitted_members: Vec<(&Service, String)> = Vec::new();
    for ((namespace, key), mut members) in groups {
        // Oldest first (creation time, then name); a port taken refuses the newcomer.
        members.sort_by(|a, b| {
            let at = |s: &Service| s.metadata.creation_timestamp.as_ref().map(|t| t.0);
            at(a)
                .cmp(&at(b))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
        let mut taken: BTreeSet<(i32, String)> = BTreeSet::new();
        let mut admitted = Vec::new();
        for svc in members {
            let mine: Vec<(i32, String)> =
                ports(svc).into_iter().map(|(p, pr, _)| (p, pr)).collect();
            if mine.iter().any(|p| taken.contains(p)) {
                shared.refused += 1;
                let why = format!(
                    "{} (key {key:?}, ports {:?}, created {:?}) is refused",
                    name_of(svc),
                    ports(svc),
                    svc.metadata.creation_timestamp.as_ref().map(|t| t.0),
                );
                // A refusal loses nothing: a load balancer of its own from before it asked
                // to share stays, with its address; otherwise it has none.
                let own = default_load_balancer_name(svc);
                if by_name.contains_key(&own) {
                    wanted.insert(own, (name_of(svc), vec![svc]));
                } else if !ingress_ips(svc).is_empty() {
                    shared.wrong_ingress += 1;
                    shared.problem(format!("{why} and has ingress {:?}", ingress_ips(svc)));
                }
                if let Some(applied) = annotation(svc, KEY_APPLIED) {
                    shared.wrong_members += 1;
                    shared.problem(format!("{why} and carries {KEY_APPLIED}: {applied:?}"));
                }
                continue;
            }
            taken.extend(mine);
            shared.admitted += 1;
            if !has_finalizer(svc) || annotation(svc, KEY_APPLIED) != Some(key.as_str()) {
                shared.wrong_members += 1;
                shared.problem(format!(
                    "{} is admitted; finalizer {}, {KEY_APPLIED} {:?}",
                    name_of(svc),
                    has_finalizer(svc),
                    annotation(svc, KEY_APPLIED)
                ));
            }
            admitted.push(svc);
        }
        let name = group_lb_name(CLUSTER, &namespace, &key);
        for svc in &admitted {
            admitted_members.push((svc, name.clone()));
        }
        wanted.insert(name, (format!("group {namespace}/{key}"), admitted));
    }
    for svc in wanted
        .values()
        .filter(|(who, _)| !who.starts_with("group "))
        .flat_map(|(_, s)| s)
    {
        admitted_members.push((svc, default_load_balancer_name(svc)));
    }
    // Ingress: an admitted member's (or a solo Service's) is its load balancer's addresses
    // (IPv4, and IPv6 for a dual-stack one).
    for (svc, lb_name) in &admitted_members {
        let ips = ingress_ips(svc);
        let lb = by_name
            .get(lb_name)
            .and_then(|l| l.first())
            .filter(|lb| !lb.ip.is_empty());
        match lb {
            None => missing += 1,
            Some(_) if ips.is_empty() => missing += 1,
            Some(lb) => {
                let want: BTreeSet<String> = [&lb.ip, &lb.ipv6]
                    .into_iter()
                    .filter(|ip| !ip.is_empty())
                    .cloned()
                    .collect();
                if ips != want {
                    shared.wrong_ingress += 1;
                    shared.problem(format!(
                        "{} has ingress {ips:?}, its LB {want:?}",
                        name_of(svc)
                    ));
                }
            }
        }
    }
    // Ports: each load balancer forwards exactly its Services' ports to their nodePorts.
    for (name, (who, members)) in &wanted {
        let Some(lb) = by_name.get(name).and_then(|l| l.first()) else {
            continue;
        };
        let want = rules_of(members);
        let got: Rules = lb
            .forwarding_rules
            .iter()
            .map(|r| (i64::from(r.entry_port), i64::from(r.target_port)))
            .collect();
        if got != want {
            shared.wrong_ports += 1;
            shared.problem(format!("{who}: LB forwards {got:?}, its members {want:?}"));
        }
    }
    outcome.load_balancers = lbs.len();
    outcome.orphan_names = by_name
        .iter()
        .filter(|(name, _)| wanted.get(*name).is_none_or(|(_, m)| m.is_empty()))
        .map(|(name, lbs)| {
            let history = cluster.history.lock().ok();
            let whose = history
                .as_ref()
                .and_then(|h| h.get(name).cloned())
                .map_or("no Service or group of this run".to_owned(), |(who, _)| who);
            format!("{name} (x{}, {}; {whose})", lbs.len(), lbs[0].status)
        })
        .collect();
    outcome.orphans = outcome.orphan_names.len();
    outcome.duplicates = by_name.values().map(|l| l.len().saturating_sub(1)).sum();
    outcome.missing_ingress = missing;
    outcome.stuck_finalizers = stuck;
    Ok(outcome.orphans == 0
        && outcome.duplicates == 0
        && outcome.missing_ingress == 0
        && outcome.stuck_finalizers == 0
        && shared.clean())
}

/// One churn operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// A new Service, with a key (most) or without.
    Create,
    Delete,
    /// `type: ClusterIP`.
    TypeAway,
    /// `type: LoadBalancer` again.
    TypeBack,
    KeyRemoved,
    /// Another key, or a key on a Service without one.
    KeyChanged,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Delete => "delete",
            Self::TypeAway => "type_away",
            Self::TypeBack => "type_back",
            Self::KeyRemoved => "key_removed",
            Self::KeyChanged => "key_changed",
        }
    }
}

struct Churn<'a> {
    cluster: &'a Cluster,
    live: BTreeMap<(String, String), Member>,
    created: usize,
    groups: BTreeSet<(String, &'static str)>,
    ops: BTreeMap<&'static str, usize>,
}

impl Churn<'_> {
    fn api(&self, namespace: &str) -> Result<Api<Service>> {
        Ok(Api::namespaced(self.cluster.cp.client()?, namespace))
    }

    /// A live Service matching `filter`, at random.
    fn pick(&self, rng: &mut Rng, filter: impl Fn(&Member) -> bool) -> Option<(String, String)> {
        let candidates: Vec<_> = self.live.iter().filter(|(_, m)| filter(m)).collect();
        if candidates.is_empty() {
            return None;
        }
        let i = usize::try_from(rng.below(candidates.len() as u64)).unwrap_or(0);
        Some(candidates[i].0.clone())
    }

    async fn patch(&self, at: &(String, String), patch: serde_json::Value) -> Result<()> {
        self.api(&at.0)?
            .patch(&at.1, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    fn key(rng: &mut Rng) -> &'static str {
        KEYS[usize::try_from(rng.below(KEYS.len() as u64)).unwrap_or(0)]
    }

    async fn step(&mut self, rng: &mut Rng) -> Result<()> {
        let roll = rng.below(100);
        let op = match roll {
            _ if self.live.len() < 3 => Op::Create,
            0..40 => Op::Create,
            40..55 => Op::Delete,
            55..65 => Op::TypeAway,
            65..72 => Op::TypeBack,
            72..82 => Op::KeyRemoved,
            _ => Op::KeyChanged,
        };
        let done = match op {
            Op::Create => {
                let namespace = format!("shared-{}", rng.below(NAMESPACES as u64));
                let name = format!("svc-{}", self.created);
                self.created += 1;
                let key = (rng.below(8) != 0).then(|| Self::key(rng));
                let port = PORTS[usize::try_from(rng.below(PORTS.len() as u64)).unwrap_or(0)];
                let mut annotations = serde_json::Map::new();
                if let Some(key) = key {
                    annotations.insert(KEY.to_owned(), key.into());
                    self.groups.insert((namespace.clone(), key));
                }
                let svc: Service = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "annotations": annotations},
                    "spec": {
                        "type": "LoadBalancer",
                        "selector": {"app": name},
                        "ports": [{"name": "p", "port": port, "targetPort": 8080, "protocol": "TCP"}],
                    },
                }))?;
                let created = self
                    .api(&namespace)?
                    .create(&PostParams::default(), &svc)
                    .await?;
                self.cluster
                    .history
                    .lock()
                    .map_err(|_| "history lock poisoned")?
                    .insert(
                        default_load_balancer_name(&created),
                        (format!("Service {namespace}/{name}"), None),
                    );
                self.live.insert(
                    (namespace, name),
                    Member {
                        key,
                        load_balancer: true,
                    },
                );
                true
            }
            Op::Delete => match self.pick(rng, |_| true) {
                Some(at) => {
                    self.api(&at.0)?
                        .delete(&at.1, &DeleteParams::default())
                        .await?;
                    self.live.remove(&at);
                    true
                }
                None => false,
            },
            Op::TypeAway => match self.pick(rng, |m| m.load_balancer) {
                Some(at) => {
                    self.patch(&at, serde_json::json!({"spec": {"type": "ClusterIP"}}))
                        .await?;
                    if let Some(m) = self.live.get_mut(&at) {
                        m.load_balancer = false;
                    }
                    true
                }
                None => false,
            },
            Op::TypeBack => match self.pick(rng, |m| !m.load_balancer) {
                Some(at) => {
                    self.patch(&at, serde_json::json!({"spec": {"type": "LoadBalancer"}}))
                        .await?;
                    if let Some(m) = self.live.get_mut(&at) {
                        m.load_balancer = true;
                    }
                    true
                }
                None => false,
            },
            Op::KeyRemoved => match self.pick(rng, |m| m.key.is_some()) {
                Some(at) => {
                    self.patch(
                        &at,
                        serde_json::json!({"metadata": {"annotations": {KEY: null}}}),
                    )
                    .await?;
                    if let Some(m) = self.live.get_mut(&at) {
                        m.key = None;
                    }
                    true
                }
                None => false,
            },
            Op::KeyChanged => {
                let at = self.pick(rng, |_| true);
                let key = Self::key(rng);
                match at {
                    Some(at) if self.live.get(&at).and_then(|m| m.key) != Some(key) => {
                        self.patch(
                            &at,
                            serde_json::json!({"metadata": {"annotations": {KEY: key}}}),
                        )
                        .await?;
                        if let Some(m) = self.live.get_mut(&at) {
                            m.key = Some(key);
                        }
                        self.groups.insert((at.0.clone(), key));
                        true
                    }
                    _ => false,
                }
            }
        };
        if done {
            *self.ops.entry(op.name()).or_default() += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(())
    }
}

/// Groups churned while the CCM is SIGKILLed and the cloud faults (see the module docs).
pub(crate) async fn shared(opts: &Options, ccm_binary: &Path) -> Result<(Outcome, Shared)> {
    let cluster = Cluster::start(ccm_binary, opts.keep).await?;
    let namespaces: Api<Namespace> = Api::all(cluster.cp.client()?);
    for i in 0..NAMESPACES {
        let ns: Namespace = serde_json::from_value(
            serde_json::json!({"metadata": {"name": format!("shared-{i}")}}),
        )?;
        namespaces.create(&PostParams::default(), &ns).await?;
    }
    for i in 0..NAMESPACES {
        for key in KEYS {
            let name = group_lb_name(CLUSTER, &format!("shared-{i}"), key);
            cluster
                .history
                .lock()
                .map_err(|_| "history lock poisoned")?
                .insert(name, (format!("group shared-{i}/{key}"), None));
        }
    }
    let timeout = Duration::from_secs(opts.timeout_secs);
    let flags = ["--leader-elect=false".to_owned()];
    let mut rng = Rng(opts.seed.max(1).wrapping_add(4));
    // Twice as many operations as Services: about 40 % create one, the rest move them.
    let steps = opts.services * 2;
    let mut kill_at: BTreeSet<usize> = BTreeSet::new();
    while kill_at.len() < opts.kills.min(steps) {
        kill_at.insert(usize::try_from(rng.below(steps as u64)).unwrap_or(0));
    }
    let mut ccm = cluster.ccm(&flags)?;
    let mut faults = Faults::default();
    faults.error_rate = 0.3;
    faults.burst_429 = 5;
    faults.retry_after_secs = 1;
    cluster.sim.handle().set_faults(faults);
    let faults_until = Instant::now() + Duration::from_secs(opts.fault_secs);
    let mut faulting = true;
    let mut churn = Churn {
        cluster: &cluster,
        live: BTreeMap::new(),
        created: 0,
        groups: BTreeSet::new(),
        ops: BTreeMap::new(),
    };
    let mut kills = 0;
    for i in 0..steps {
        churn.step(&mut rng).await?;
        if faulting && Instant::now() >= faults_until {
            churn.cluster.sim.handle().set_faults(Faults::default());
            faulting = false;
        }
        if kill_at.contains(&i) {
            ccm.signal(Signal::Kill);
            ccm.wait_exit(timeout).await;
            kills += 1;
            tokio::time::sleep(Duration::from_millis(rng.below(1000))).await;
            ccm = churn.cluster.ccm(&flags)?;
        }
    }
    let mut result = Shared {
        groups: churn.groups.len(),
        ops: std::mem::take(&mut churn.ops),
        ..Shared::default()
    };
    let created = churn.created;
    drop(churn);
    tokio::time::sleep(faults_until.saturating_duration_since(Instant::now())).await;
    cluster.sim.handle().set_faults(Faults::default());
    let mut outcome = Outcome {
        experiment: "shared",
        services: created,
        deleted: result.ops.get("delete").copied().unwrap_or_default(),
        disruptions: kills + 1,
        ..Outcome::default()
    };
    let since = Instant::now();
    loop {
        if inspect(&cluster, &mut outcome, &mut result).await? {
            outcome.converged_secs = Some(since.elapsed().as_secs_f64());
            break;
        }
        if since.elapsed() > timeout {
            eprintln!(
                "shared: did not converge: {:?}; CCM log tail:\n{}",
                result.problems,
                ccm.log_tail(LOG_TAIL)
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(ccm);
    let events: Api<Event> = Api::all(cluster.cp.client()?);
    result.refusals = events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("LoadBalancerSharingRefused"))
        .map(|e| i64::from(e.count.unwrap_or(1)))
        .sum();
    Ok((outcome, result))
}
