//! `ccm-chaos`: the reliability suite. Runs the DigitalOcean-like CCM
//! (`do-like-cloud-controller-manager`) as a process against a real kube-apiserver + etcd
//! and the API simulator, breaks things on purpose, and prints what was left behind:
//!
//! - `kill`: Services are created and deleted while the CCM is SIGKILLed and restarted;
//! - `faults`: Services are created while the cloud answers 30 % 5xx and bursts of 429;
//! - `pause`: two replicas with leader election; the leader is SIGSTOPped past its Lease,
//!   the standby takes over, and the paused one is resumed;
//! - `apiserver`, `etcd`: the server is stopped for `--outage-secs` while the CCM runs,
//!   started again, and Services are created and deleted as soon as it answers;
//! - `shared`: groups of Services sharing a load balancer are churned (members join,
//!   leave, conflict) while the CCM is SIGKILLed and the cloud faults; the groups' load
//!   balancers, ports and addresses are then checked against an independent computation.
//!
//! For each: load balancers per Service (orphans, duplicates), Services missing an ingress,
//! deleted Services stuck on their finalizer, and the seconds from the end of the disruption
//! until everything converged. A benchmark-like tool, not a test: it reports, and exits 1
//! only when an experiment did not converge or left something behind.
//!
//! ```sh
//! cargo build -p ccm-do-like-cloud -p ccm-chaos && target/debug/ccm-chaos
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod shared;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ccm_core::provider::default_load_balancer_name;
use ccm_do_like_simulator::{Faults, RunningSimulator, SimulatorConfig};
use ccm_test::process::{CcmProcess, Signal};
use ccm_test::{ControlPlane, Server};
use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use kube::api::{Api, DeleteParams, ListParams, PostParams};

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

const TOKEN: &str = "chaos-token";
const CLUSTER: &str = "chaos";
const NAMESPACE: &str = "chaos";
const NODES: usize = 3;

/// The reliability suite (see the crate docs).
#[derive(Clone, Debug, Parser)]
#[command(name = "ccm-chaos")]
struct Options {
    /// Experiments to run, comma-separated: kill, faults, pause, handover, apiserver, etcd,
    /// shared.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill,faults,pause,handover,apiserver,etcd,shared"
    )]
    experiments: Vec<String>,
    /// LoadBalancer Services created per experiment (`shared`: twice as many churn
    /// operations, about 40 % of them creations).
    #[arg(long, default_value_t = 60)]
    services: usize,
    /// SIGKILLs of the CCM in `kill` and `shared` (spread over the churn).
    #[arg(long, default_value_t = 10)]
    kills: usize,
    /// How long the cloud misbehaves in `faults` and `shared`, in seconds.
    #[arg(long, default_value_t = 20)]
    fault_secs: u64,
    /// The leader's Lease duration in `pause`, in seconds (renew deadline 2/3 of it, retry
    /// period 1/7); the leader is paused for twice this.
    #[arg(long, default_value_t = 6)]
    lease_secs: u64,
    /// How long the server is down in `apiserver` and `etcd`, in seconds.
    #[arg(long, default_value_t = 20)]
    outage_secs: u64,
    /// The DO-like client's budget of requests a minute (`requestsPerMinute`); DigitalOcean
    /// allows 250, the default. 0: no limit.
    #[arg(long, default_value_t = 250)]
    requests_per_minute: u32,
    /// How long an experiment may take to converge, in seconds.
    #[arg(long, default_value_t = 180)]
    timeout_secs: u64,
    /// Seed of the kill schedule and of which Services are deleted.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The CCM binary (default: `do-like-cloud-controller-manager` next to this one).
    #[arg(long)]
    ccm: Option<PathBuf>,
    /// Write the results as JSON here too.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Keep each experiment's folder (the CCM logs, the cloud-config) and print its path.
    #[arg(long)]
    keep: bool,
}

/// What an experiment left behind, and how long it took to get there.
#[derive(Clone, Debug, Default)]
struct Outcome {
    experiment: &'static str,
    services: usize,
    deleted: usize,
    disruptions: usize,
    load_balancers: usize,
    orphans: usize,
    duplicates: usize,
    missing_ingress: usize,
    stuck_finalizers: usize,
    converged_secs: Option<f64>,
    /// Outages only: seconds from the server's return to the first Service created (what
    /// the control plane itself takes to serve writes again).
    first_write_secs: Option<f64>,
    /// Outages only: seconds from the suite's last change (its last create or delete after
    /// the return) to convergence, beside `converged_secs` from the return.
    after_last_change_secs: Option<f64>,
    /// Cloud mutations (POST, PUT, DELETE) the resumed leader made (`pause` only).
    mutations_after_resume: Option<u64>,
    /// Seconds from SIGSTOP (`pause`) or SIGTERM (`handover`) to another holder of the
    /// Lease.
    takeover_secs: Option<f64>,
    /// `faults` only: the requests the cloud answered while it misbehaved, and from the end
    /// of that to convergence.
    fault_requests: Option<u64>,
    recovery_requests: Option<u64>,
    /// Every request the cloud answered in the experiment, by route.
    requests_by_route: BTreeMap<String, u64>,
    /// The names of the orphaned load balancers, for the report.
    orphan_names: Vec<String>,
    /// The groups' figures and checks (`shared` only).
    shared: Option<shared::Shared>,
}

impl Outcome {
    /// The outcome of `experiment` so far: `services` Services created, those `churn`
    /// deleted, `disruptions` made.
    fn new(experiment: &'static str, services: usize, churn: &Churn, disruptions: usize) -> Self {
        Self {
            experiment,
            services,
            deleted: churn.deleted,
            disruptions,
            ..Self::default()
        }
    }

    fn clean(&self) -> bool {
        self.converged_secs.is_some()
            && self.orphans == 0
            && self.duplicates == 0
            && self.missing_ingress == 0
            && self.stuck_finalizers == 0
            && self.mutations_after_resume.unwrap_or(0) == 0
            && self.shared.as_ref().is_none_or(shared::Shared::clean)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "experiment": self.experiment,
            "services": self.services,
            "deleted": self.deleted,
            "disruptions": self.disruptions,
            "load_balancers": self.load_balancers,
            "orphans": self.orphans,
            "duplicates": self.duplicates,
            "missing_ingress": self.missing_ingress,
            "stuck_finalizers": self.stuck_finalizers,
            "converged_secs": self.converged_secs,
            "first_write_secs": self.first_write_secs,
            "after_last_change_secs": self.after_last_change_secs,
            "mutations_after_resume": self.mutations_after_resume,
            "takeover_secs": self.takeover_secs,
            "fault_requests": self.fault_requests,
            "recovery_requests": self.recovery_requests,
            "requests_by_route": self.requests_by_route,
            "orphan_names": self.orphan_names,
            "shared": self.shared.as_ref().map(shared::Shared::json),
        })
    }
}

/// A small deterministic generator (xorshift64*), so a run can be repeated with `--seed`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The lines of a CCM's log quoted in a report.
const LOG_TAIL: usize = 20;

/// A control plane, the simulator with one droplet per Node, and the Nodes.
struct Cluster {
    cp: ControlPlane,
    sim: RunningSimulator,
    dir: tempfile::TempDir,
    config: PathBuf,
    ccm_binary: PathBuf,
    /// CCMs started so far (their logs are numbered).
    started: std::sync::atomic::AtomicUsize,
    /// Every Service created: its load balancer's name → the Service's name and, once
    /// deleted, whether it had the cleanup finalizer then.
    history: std::sync::Mutex<BTreeMap<String, (String, Option<bool>)>>,
}

/// `--requests-per-minute`, for every cluster's cloud-config.
static REQUESTS_PER_MINUTE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

impl Cluster {
    async fn start(ccm_binary: &Path, keep: bool) -> Result<Self> {
        let cp = ControlPlane::start().await.map_err(|e| {
            format!(
                "a real control plane (tools/control-plane/build.sh, or KUBEBUILDER_ASSETS): {e}"
            )
        })?;
        let mut cfg = SimulatorConfig::new(TOKEN);
        cfg.lb_activation_delay = Duration::from_millis(300);
        let sim = RunningSimulator::start(cfg).await?;
        let mut dir = tempfile::tempdir()?;
        if keep {
            dir.disable_cleanup(true);
            eprintln!("ccm-chaos: keeping {}", dir.path().display());
        }
        let token = dir.path().join("token");
        std::fs::write(&token, format!("{TOKEN}\n"))?;
        let config = dir.path().join("do-like.yaml");
        std::fs::write(
            &config,
            format!(
                "apiUrl: {}\ntokenFile: {}\nregion: ams3\ncacheTtlSeconds: 1\nrequestsPerSecond: 200\nmaxRetryAfterSeconds: 2\nrequestsPerMinute: {}\n",
                sim.url(),
                token.display(),
                REQUESTS_PER_MINUTE.get().copied().unwrap_or(250)
            ),
        )?;
        let client = cp.client()?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}}))?;
        namespaces.create(&PostParams::default(), &ns).await?;
        let nodes: Api<Node> = Api::all(client);
        for i in 0..NODES {
            let name = format!("chaos-node-{i}");
            sim.handle().create_droplet(&name, "s-2vcpu-4gb", "ams3");
            let node: Node = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"taints": [{
                    "key": ccm_core::well_known::TAINT_UNINITIALIZED,
                    "value": "true",
                    "effect": "NoSchedule"
                }]},
            }))?;
            nodes.create(&PostParams::default(), &node).await?;
        }
        Ok(Self {
            cp,
            sim,
            dir,
            config,
            ccm_binary: ccm_binary.to_owned(),
            started: std::sync::atomic::AtomicUsize::new(0),
            history: std::sync::Mutex::default(),
        })
    }

    /// Starts a CCM with the common flags and `extra`; SIGKILLed when dropped.
    fn ccm(&self, extra: &[String]) -> Result<CcmProcess> {
        let n = 1 + self
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = self.dir.path().join(format!("ccm-{n}.log"));
        let ccm = CcmProcess::builder(&self.ccm_binary)
            .args([
                "--cloud-provider=digitalocean".to_owned(),
                format!("--cloud-config={}", self.config.display()),
                format!("--kubeconfig={}", self.cp.kubeconfig_path().display()),
                format!("--cluster-name={CLUSTER}"),
                "--configure-cloud-routes=false".to_owned(),
                "--secure-port=0".to_owned(),
                "--concurrent-service-syncs=4".to_owned(),
            ])
            .args(extra)
            .log_file(log)
            .try_spawn()?;
        Ok(ccm)
    }

    fn services(&self) -> Result<Api<Service>> {
        Ok(Api::namespaced(self.cp.client()?, NAMESPACE))
    }

    async fn create_service(&self, name: &str) -> Result<()> {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": name},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
            },
        }))?;
        let created = self
            .services()?
            .create(&PostParams::default(), &svc)
            .await?;
        self.history
            .lock()
            .map_err(|_| "history lock poisoned")?
            .insert(
                default_load_balancer_name(&created),
                (name.to_owned(), None),
            );
        Ok(())
    }

    async fn delete_service(&self, name: &str) -> Result<()> {
        let api = self.services()?;
        let before = api.get(name).await?;
        let had_finalizer = before.metadata.finalizers.as_ref().is_some_and(|f| {
            f.iter()
                .any(|f| f == ccm_core::well_known::FINALIZER_LOAD_BALANCER_CLEANUP)
        });
        api.delete(name, &DeleteParams::default()).await?;
        if let Some(entry) = self
            .history
            .lock()
            .map_err(|_| "history lock poisoned")?
            .get_mut(&default_load_balancer_name(&before))
        {
            entry.1 = Some(had_finalizer);
        }
        Ok(())
    }

    /// The cloud mutations the simulator has answered so far.
    fn mutations(&self) -> u64 {
        self.sim
            .handle()
            .request_counts()
            .iter()
            .filter(|(key, _)| {
                ["POST ", "PUT ", "DELETE "]
                    .iter()
                    .any(|m| key.starts_with(m))
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// Every request the simulator has answered so far.
    fn requests(&self) -> u64 {
        self.sim.handle().request_counts().values().sum()
    }

    /// The state now: what is left behind, compared with the live Services.
    async fn inspect(&self, outcome: &mut Outcome) -> Result<bool> {
        let services = self.services()?.list(&ListParams::default()).await?;
        let mut wanted = BTreeSet::new();
        let mut stuck = 0;
        let mut missing = 0;
        for svc in &services.items {
            if svc.metadata.deletion_timestamp.is_some() {
                stuck += 1;
                continue;
            }
            wanted.insert(default_load_balancer_name(svc));
            let has_ingress = svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .is_some_and(|i| !i.is_empty());
            if !has_ingress {
                missing += 1;
            }
        }
        let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
        let lbs = self.sim.handle().load_balancers();
        for lb in &lbs {
            *by_name.entry(lb.name.clone()).or_default() += 1;
        }
        outcome.load_balancers = lbs.len();
        outcome.orphan_names = lbs
            .iter()
            .filter(|lb| !wanted.contains(&lb.name))
            .map(|lb| {
                let history = self.history.lock().ok();
                let service = history
                    .as_ref()
                    .and_then(|h| h.get(&lb.name).cloned())
                    .map_or("no Service of this run".to_owned(), |(name, fin)| {
                        format!("Service {name}, finalizer when deleted: {fin:?}")
                    });
                format!("{} (id {}, {}; {service})", lb.name, lb.id, lb.status)
            })
            .collect();
        outcome.orphans = by_name.keys().filter(|n| !wanted.contains(*n)).count();
        outcome.duplicates = by_name.values().map(|n| n.saturating_sub(1)).sum();
        outcome.missing_ingress =
            missing + wanted.iter().filter(|n| !by_name.contains_key(*n)).count();
        outcome.stuck_finalizers = stuck;
        Ok(outcome.orphans == 0
            && outcome.duplicates == 0
            && outcome.missing_ingress == 0
            && outcome.stuck_finalizers == 0)
    }

    /// Waits until nothing is left behind; records the seconds since `since`. On timeout
    /// it prints the tail of `ccm`'s log, the replica that should have converged.
    async fn converge(
        &self,
        outcome: &mut Outcome,
        since: Instant,
        timeout: Duration,
        ccm: &CcmProcess,
    ) -> Result<()> {
        loop {
            if self.inspect(outcome).await? {
                outcome.converged_secs = Some(since.elapsed().as_secs_f64());
                return Ok(());
            }
            if since.elapsed() > timeout {
                eprintln!(
                    "{}: did not converge; CCM log tail:\n{}",
                    outcome.experiment,
                    ccm.log_tail(LOG_TAIL)
                );
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Creates Services one by one and deletes about one in four a little later.
#[derive(Default)]
struct Churn {
    pending_delete: Vec<String>,
    deleted: usize,
}

impl Churn {
    /// Creates Service `i` of `total`, and deletes what is due.
    async fn step(
        &mut self,
        cluster: &Cluster,
        i: usize,
        total: usize,
        rng: &mut Rng,
    ) -> Result<()> {
        let name = format!("svc-{i}");
        cluster.create_service(&name).await?;
        if rng.below(4) == 0 {
            self.pending_delete.push(name);
        }
        if self.pending_delete.len() > 1 || (i + 1 == total && !self.pending_delete.is_empty()) {
            for name in self.pending_delete.drain(..) {
                cluster.delete_service(&name).await?;
                self.deleted += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(())
    }
}

/// SIGKILL and restart the CCM at random points while Services come and go.
async fn kill(opts: &Options, ccm_binary: &Path) -> Result<Outcome> {
    let cluster = Cluster::start(ccm_binary, opts.keep).await?;
    let timeout = Duration::from_secs(opts.timeout_secs);
    let flags = ["--leader-elect=false".to_owned()];
    let mut rng = Rng(opts.seed.max(1));
    let mut kill_at: BTreeSet<usize> = BTreeSet::new();
    while kill_at.len() < opts.kills.min(opts.services) {
        kill_at.insert(usize::try_from(rng.below(opts.services as u64)).unwrap_or(0));
    }
    let mut ccm = cluster.ccm(&flags)?;
    let mut churn = Churn::default();
    for i in 0..opts.services {
        churn.step(&cluster, i, opts.services, &mut rng).await?;
        if kill_at.contains(&i) {
            ccm.signal(Signal::Kill);
            ccm.wait_exit(timeout).await;
            // Down for up to a second, as a crash-looping pod would be.
            tokio::time::sleep(Duration::from_millis(rng.below(1000))).await;
            ccm = cluster.ccm(&flags)?;
        }
    }
    let mut outcome = Outcome::new("kill", opts.services, &churn, kill_at.len());
    cluster
        .converge(&mut outcome, Instant::now(), timeout, &ccm)
        .await?;
    outcome.requests_by_route = cluster.sim.handle().request_counts();
    Ok(outcome)
}

/// 30 % 5xx and bursts of 429 while Services come and go; converged after the faults end.
async fn faults(opts: &Options, ccm_binary: &Path) -> Result<Outcome> {
    let cluster = Cluster::start(ccm_binary, opts.keep).await?;
    let ccm = cluster.ccm(&["--leader-elect=false".to_owned()])?;
    let timeout = Duration::from_secs(opts.timeout_secs);
    let mut rng = Rng(opts.seed.max(1).wrapping_add(1));
    let mut faults = Faults::default();
    faults.error_rate = 0.3;
    faults.burst_429 = 5;
    faults.retry_after_secs = 1;
    let before = cluster.requests();
    cluster.sim.handle().set_faults(faults);
    let until = Instant::now() + Duration::from_secs(opts.fault_secs);
    let mut churn = Churn::default();
    for i in 0..opts.services {
        churn.step(&cluster, i, opts.services, &mut rng).await?;
    }
    let remaining = until.saturating_duration_since(Instant::now());
    tokio::time::sleep(remaining).await;
    cluster.sim.handle().set_faults(Faults::default());
    let during = cluster.requests();
    let mut outcome = Outcome::new("faults", opts.services, &churn, 1);
    outcome.fault_requests = Some(during - before);
    cluster
        .converge(&mut outcome, Instant::now(), timeout, &ccm)
        .await?;
    outcome.recovery_requests = Some(cluster.requests() - during);
    outcome.requests_by_route = cluster.sim.handle().request_counts();
    Ok(outcome)
}

/// The holder of the CCM's Lease, if any.
async fn lease_holder(cluster: &Cluster) -> Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(cluster.cp.client()?, "kube-system");
    Ok(leases
        .get_opt("cloud-controller-manager")
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// Polls `check` every 100 ms until it answers `Some`, for at most `timeout`.
async fn wait_for<T, F, Fut>(timeout: Duration, mut check: F) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(Some(v));
        }
        if start.elapsed() > timeout {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The leader-election flags of `pause` and `handover`: a Lease of `lease` seconds, renew
/// deadline 2/3 of it, retry period 1/7.
fn leader_election(lease: u64) -> [String; 4] {
    [
        "--leader-elect=true".to_owned(),
        format!("--leader-elect-lease-duration={lease}s"),
        format!("--leader-elect-renew-deadline={}ms", lease * 2000 / 3),
        format!(
            "--leader-elect-retry-period={}ms",
            (lease * 1000 / 7).max(200)
        ),
    ]
}

/// Two replicas with `timing`'s leader election: the one that took the Lease, its identity,
/// and the standby started after it.
async fn leader_and_standby(
    cluster: &Cluster,
    timing: &[String],
    timeout: Duration,
) -> Result<(CcmProcess, String, CcmProcess)> {
    let leader = cluster.ccm(timing)?;
    let first = wait_for(timeout, || lease_holder(cluster))
        .await?
        .ok_or("nobody took the Lease")?;
    let standby = cluster.ccm(timing)?;
    Ok((leader, first, standby))
}

/// Waits (at most `timeout`) until the Lease has a holder other than `first`.
async fn new_holder(cluster: &Cluster, first: &str, timeout: Duration) -> Result<Option<String>> {
    wait_for(timeout, || async {
        Ok(lease_holder(cluster).await?.filter(|h| h != first))
    })
    .await
}

/// Two replicas; the leader's Pod is deleted (SIGTERM) while Services come and go: the
/// standby takes over and converges, measured from the SIGTERM (takeover included).
async fn handover(opts: &Options, ccm_binary: &Path) -> Result<Outcome> {
    let cluster = Cluster::start(ccm_binary, opts.keep).await?;
    let timing = leader_election(opts.lease_secs.max(3));
    let timeout = Duration::from_secs(opts.timeout_secs);
    let (mut leader, first, standby) = leader_and_standby(&cluster, &timing, timeout).await?;
    let mut rng = Rng(opts.seed.max(1).wrapping_add(4));
    let mut churn = Churn::default();
    let half = opts.services / 2;
    for i in 0..half {
        churn.step(&cluster, i, half, &mut rng).await?;
    }
    // The Pod is deleted while the churn goes on: its SIGTERM comes at a random point.
    leader.signal(Signal::Term);
    let terminated = Instant::now();
    let rest = async {
        for i in half..opts.services {
            churn.step(&cluster, i, opts.services, &mut rng).await?;
        }
        Result::<f64>::Ok(terminated.elapsed().as_secs_f64())
    };
    // Watched while the churn goes on.
    let takeover = async {
        let holder = new_holder(&cluster, &first, timeout).await?;
        Result::<Option<f64>>::Ok(holder.map(|_| terminated.elapsed().as_secs_f64()))
    };
    let (churned, takeover) = tokio::join!(rest, takeover);
    let (churned, takeover) = (churned?, takeover?);
    let mut outcome = Outcome::new("handover", opts.services, &churn, 1);
    outcome.takeover_secs = takeover;
    cluster
        .converge(&mut outcome, terminated, timeout, &standby)
        .await?;
    outcome.after_last_change_secs = outcome.converged_secs.map(|s| (s - churned).max(0.0));
    leader.wait_exit(timeout).await;
    Ok(outcome)
}

/// Two replicas; the leader is SIGSTOPped past its Lease, the standby takes over and
/// converges, then the paused one is resumed: it must not act on the cloud.
async fn pause(opts: &Options, ccm_binary: &Path) -> Result<Outcome> {
    let cluster = Cluster::start(ccm_binary, opts.keep).await?;
    let lease = opts.lease_secs.max(3);
    let timing = leader_election(lease);
    let timeout = Duration::from_secs(opts.timeout_secs);
    let (mut leader, first, standby) = leader_and_standby(&cluster, &timing, timeout).await?;
    let mut rng = Rng(opts.seed.max(1).wrapping_add(2));
    let mut churn = Churn::default();
    for i in 0..opts.services {
        churn.step(&cluster, i, opts.services, &mut rng).await?;
    }
    let mut outcome = Outcome::new("pause", opts.services, &churn, 1);
    cluster
        .converge(&mut outcome, Instant::now(), timeout, &leader)
        .await?;

    // Work the paused leader will find queued when it wakes: Services created while it
    // sleeps reach it as watch events after SIGCONT.
    leader.signal(Signal::Stop);
    let stopped = Instant::now();
    for i in opts.services..opts.services + 3 {
        cluster.create_service(&format!("svc-{i}")).await?;
    }
    let takeover = new_holder(&cluster, &first, timeout).await?;
    outcome.takeover_secs = takeover.map(|_| stopped.elapsed().as_secs_f64());
    outcome.services += 3;
    cluster
        .converge(&mut outcome, Instant::now(), timeout, &standby)
        .await?;
    // Keep it paused well past its Lease, then let the new leader go quiet.
    tokio::time::sleep(Duration::from_secs(lease * 2).saturating_sub(stopped.elapsed())).await;
    let mut quiet = cluster.mutations();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = cluster.mutations();
        if now == quiet {
            break;
        }
        quiet = now;
    }
    leader.signal(Signal::Cont);
    // The resumed replica finds out it lost the Lease and exits; anything it sent to the
    // cloud before that counts (the new leader is quiet: nothing has changed).
    let _ = wait_for(Duration::from_secs(lease * 2), || {
        let exited = !leader.is_running();
        async move { Ok(exited.then_some(())) }
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    outcome.mutations_after_resume = Some(cluster.mutations() - quiet);
    if leader.is_running() {
        eprintln!(
            "pause: the resumed leader did not exit; its log tail:\n{}",
            leader.log_tail(LOG_TAIL)
        );
    }
    drop(standby);
    Ok(outcome)
}

/// A server of the control plane down for `--outage-secs`; then Services are created and
/// deleted as soon as it is back, and converged is measured from its return.
async fn outage(opts: &Options, ccm_binary: &Path, server: Server) -> Result<Outcome> {
    let cluster = Cluster::start(ccm_binary, opts.keep).await?;
    let ccm = cluster.ccm(&["--leader-elect=false".to_owned()])?;
    let timeout = Duration::from_secs(opts.timeout_secs);
    let mut rng = Rng(opts.seed.max(1).wrapping_add(3));
    let mut churn = Churn::default();
    let before = opts.services / 2;
    for i in 0..before {
        churn.step(&cluster, i, before, &mut rng).await?;
    }
    let experiment = if server == Server::Etcd {
        "etcd"
    } else {
        "apiserver"
    };
    let mut outcome = Outcome::new(experiment, opts.services, &churn, 1);
    cluster
        .converge(&mut outcome, Instant::now(), timeout, &ccm)
        .await?;
    cluster.cp.stop_server(server).await?;
    tokio::time::sleep(Duration::from_secs(opts.outage_secs)).await;
    cluster.cp.start_server(server).await?;
    let back = Instant::now();
    for i in before..opts.services {
        churn.step(&cluster, i, opts.services, &mut rng).await?;
        if i == before {
            outcome.first_write_secs = Some(back.elapsed().as_secs_f64());
        }
    }
    let churned = back.elapsed().as_secs_f64();
    outcome.deleted = churn.deleted;
    outcome.converged_secs = None;
    cluster.converge(&mut outcome, back, timeout, &ccm).await?;
    outcome.after_last_change_secs = outcome.converged_secs.map(|s| (s - churned).max(0.0));
    Ok(outcome)
}

fn print(outcomes: &[Outcome]) {
    println!(
        "{:<8} {:>8} {:>7} {:>11} {:>4} {:>7} {:>10} {:>15} {:>14} {:>13} {:>11} {:>16} {:>12} {:>14} {:>14} {:>17}",
        "scenario",
        "services",
        "deleted",
        "disruptions",
        "lbs",
        "orphans",
        "duplicates",
        "missing_ingress",
        "stuck_finalizers",
        "converged_s",
        "takeover_s",
        "mutations_resumed",
        "first_write_s",
        "after_change_s",
        "fault_requests",
        "recovery_requests"
    );
    let secs = |s: Option<f64>| s.map_or("-".to_owned(), |s| format!("{s:.1}"));
    let count = |n: Option<u64>| n.map_or("-".to_owned(), |n| n.to_string());
    for o in outcomes {
        println!(
            "{:<8} {:>8} {:>7} {:>11} {:>4} {:>7} {:>10} {:>15} {:>14} {:>13} {:>11} {:>16} {:>12} {:>14} {:>14} {:>17}",
            o.experiment,
            o.services,
            o.deleted,
            o.disruptions,
            o.load_balancers,
            o.orphans,
            o.duplicates,
            o.missing_ingress,
            o.stuck_finalizers,
            o.converged_secs
                .map_or("never".to_owned(), |s| format!("{s:.1}")),
            secs(o.takeover_secs),
            o.mutations_after_resume
                .map_or("-".to_owned(), |n| n.to_string()),
            secs(o.first_write_secs),
            secs(o.after_last_change_secs),
            count(o.fault_requests),
            count(o.recovery_requests),
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let opts = Options::parse();
    let _ = REQUESTS_PER_MINUTE.set(opts.requests_per_minute);
    let ccm = opts.ccm.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .unwrap_or_default()
            .with_file_name("do-like-cloud-controller-manager")
    });
    if !ccm.exists() {
        eprintln!(
            "ccm-chaos: {} not found; build it with `cargo build -p ccm-do-like-cloud` or pass --ccm",
            ccm.display()
        );
        return std::process::ExitCode::from(2);
    }
    let mut outcomes = Vec::new();
    for experiment in &opts.experiments {
        eprintln!("ccm-chaos: {experiment}");
        let result = match experiment.as_str() {
            "kill" => kill(&opts, &ccm).await,
            "faults" => faults(&opts, &ccm).await,
            "pause" => pause(&opts, &ccm).await,
            "handover" => handover(&opts, &ccm).await,
            "apiserver" => outage(&opts, &ccm, Server::KubeApiserver).await,
            "etcd" => outage(&opts, &ccm, Server::Etcd).await,
            "shared" => shared::shared(&opts, &ccm)
                .await
                .map(|(mut outcome, shared)| {
                    outcome.shared = Some(shared);
                    outcome
                }),
            other => Err(format!(
                "unknown experiment {other:?} (kill, faults, pause, handover, apiserver, etcd, shared)"
            )
            .into()),
        };
        match result {
            Ok(outcome) => outcomes.push(outcome),
            Err(err) => {
                eprintln!("ccm-chaos: {experiment}: {err}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    print(&outcomes);
    for o in &outcomes {
        if let Some(s) = &o.shared {
            println!(
                "{}: {} groups, {} churn operations {:?}, {} sharing refusals, {} admitted and {} refused at the end; wrong ingress {}, wrong ports {}, wrong members {}",
                o.experiment,
                s.groups,
                s.ops.values().sum::<usize>(),
                s.ops,
                s.refusals,
                s.admitted,
                s.refused,
                s.wrong_ingress,
                s.wrong_ports,
                s.wrong_members,
            );
            for problem in &s.problems {
                println!("  {problem}");
            }
        }
        for orphan in &o.orphan_names {
            println!("{}: orphan {orphan}", o.experiment);
        }
    }
    if let Some(out) = &opts.out {
        let json = serde_json::json!({
            "options": {
                "services": opts.services, "kills": opts.kills, "fault_secs": opts.fault_secs,
                "lease_secs": opts.lease_secs, "outage_secs": opts.outage_secs, "seed": opts.seed,
            },
            "results": outcomes.iter().map(Outcome::json).collect::<Vec<_>>(),
        });
        if let Err(err) = std::fs::write(out, format!("{json:#}\n")) {
            eprintln!("ccm-chaos: {}: {err}", out.display());
            return std::process::ExitCode::FAILURE;
        }
    }
    if outcomes.iter().all(Outcome::clean) {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
