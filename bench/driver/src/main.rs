//! `ccm-bench`: runs our `fake-cloud-controller-manager` and the Go reference CCM
//! (`bench/go-reference-ccm`) one at a time, each against a fresh local control plane
//! (`ccm-test`), with the same flags and the same fake-cloud latency, and compares them.
//!
//! ```sh
//! cargo run -p ccm-bench --release -- --nodes 100 --services 200 --routes 1000
//! ```
//!
//! Scenarios (see `docs/benchmarks.md`):
//!
//! 1. node initialisation: `--nodes` Nodes are created with the
//!    `node.cloudprovider.kubernetes.io/uninitialized` taint; measured: the time until
//!    every one is initialised (taint gone, provider ID set) and the API requests the CCM
//!    made per Node (from its `/metrics` `rest_client_requests_total`, all series summed,
//!    the count before the Nodes were created subtracted);
//! 2. load balancers (`--services` > 0): that many `LoadBalancer` Services are created;
//!    measured: the time until every one has an ingress IP, and the API requests. Then
//!    `--new-nodes` more Nodes join (tainted, as kubelets register them); measured: the time
//!    until every load balancer points at every one of them (read from the fake cloud's
//!    `fake_cloud_load_balancer_hosts_min` on `/metrics`), and the cloud calls made.
//! 3. routes (`--routes` > 0): that many untainted Nodes with a podCIDR are created;
//!    measured: the time until the route controller has marked each one's network
//!    available (`NetworkUnavailable=False`, set once its route exists), and duplicate
//!    route creates (0 is the target).
//! 4. idle (`--idle-secs` > 0): with everything above in place, nothing changes for that
//!    long; measured: CPU seconds, API requests and cloud calls per minute, and RSS.
//!
//! Each control plane writes an audit log of the CCM's Node status writes (the CCM runs as
//! a user of its own); the driver counts duplicate Node condition writes from it, and
//! redundant load balancer updates from the fake cloud's metrics (0 is the target of both).
//! A scenario that does not finish within `--timeout-secs` is recorded as incomplete and
//! that CCM's later scenarios are skipped; the run goes on with the next CCM.
//!
//! For each CCM: CPU seconds (`utime + stime` from `/proc/<pid>/stat`) spent in each
//! scenario, cloud calls by method (`ccm_cloud_requests_total`, which the Go cloud exports
//! under the same name), peak RSS (`VmHWM`) and RSS over time (`VmRSS` every 250 ms).
//! Progress goes to stderr; a table with the ratio Rust/Go to stdout; everything to
//! `--out` as JSON, and a picture to `--svg`.
#![forbid(unsafe_code)]

mod audit;
mod objects;
mod process;
mod report;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ccm_test::ControlPlane;
use ccm_test::fixtures::has_ingress;
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, PostParams};

use crate::audit::AuditLog;
use crate::objects::{
    lb_service, node_has_route, node_initialised, poll_lb_hosts, route_node, tainted_node,
    watch_done,
};
use crate::process::{
    API_REQUESTS, DUPLICATE_ROUTE_CREATES, Process, REDUNDANT_LB_UPDATES, RssSampler, Scrape,
    cpu_seconds, delta,
};
use crate::report::{CcmResult, IdleResult, Machine, Report, ScenarioResult, Settings, svg, table};

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

/// Command-line options.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "ccm-bench",
    about = "Benchmarks our CCM against the Go reference CCM"
)]
struct Options {
    /// Nodes created in scenario 1 (node initialisation).
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// LoadBalancer Services created in scenario 2; 0 skips it.
    #[arg(long, default_value_t = 0)]
    services: usize,
    /// Nodes added once the load balancers are ready (scenario 2, second half); 0 skips it.
    #[arg(long, default_value_t = 50)]
    new_nodes: usize,
    /// Nodes with a podCIDR created in scenario 3 (routes); 0 skips it.
    #[arg(long, default_value_t = 0)]
    routes: usize,
    /// Seconds of scenario 4 (idle: nothing changes); 0 skips it.
    #[arg(long, default_value_t = 0)]
    idle_secs: u64,
    /// Which CCMs to run, in order: `rust`, `go`, or both (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "rust,go")]
    ccm: Vec<String>,
    /// Runs of each CCM, alternating the order (`--ccm` order first, then reversed, …);
    /// the table shows each measure's median and range over the runs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
    /// `--kube-api-qps` of both CCMs.
    #[arg(long, default_value_t = 20.0)]
    qps: f64,
    /// `--kube-api-burst` of both CCMs.
    #[arg(long, default_value_t = 30)]
    burst: u32,
    /// `--concurrent-node-syncs` and `--concurrent-service-syncs` of both CCMs.
    #[arg(long, default_value_t = 1)]
    workers: u32,
    /// How the driver watches Nodes and Services to see them done: `protobuf`, as
    /// kube-controller-manager, the scheduler and kubelets watch them in a cluster (the API
    /// server encodes each change once per encoding its watchers ask for, so a CCM's watch in
    /// the cluster's encoding costs it no second encoding), or `json` (before issue 43).
    #[arg(long, default_value = "protobuf", value_parser = ["protobuf", "json"])]
    driver_watch: String,
    /// `--kube-api-content-type` of both CCMs (unset: each CCM's default, protobuf for both).
    #[arg(long)]
    content_type: Option<String>,
    /// Latency of every fake-cloud call, in milliseconds (`latencyMs`).
    #[arg(long, default_value_t = 5)]
    latency_ms: u64,
    /// Our CCM binary; default: `cargo build --release` it statically linked, as its image
    /// ships it, and use `target/<host triple>/release/`.
    #[arg(long)]
    rust_ccm: Option<PathBuf>,
    /// The Go reference binary; default: what `bench/build-go-reference.sh` prints.
    #[arg(long)]
    go_ccm: Option<PathBuf>,
    /// Give up on a scenario after this many seconds: it is recorded as incomplete, and that
    /// CCM's later scenarios are skipped (the run goes on with the next CCM).
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Where the JSON results go.
    #[arg(long, default_value = "target/bench/results.json")]
    out: PathBuf,
    /// Run nothing: read results JSON written before, print its table and draw its picture.
    #[arg(long)]
    replot: Option<PathBuf>,
    /// Where the picture goes: objects done over time per scenario, and RSS (SVG).
    #[arg(long, default_value = "target/bench/progress.svg")]
    svg: PathBuf,
}

fn main() -> std::process::ExitCode {
    let opts = Options::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ccm-bench: cannot start a runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Ctrl-C or SIGTERM drops the run, and with it the CCM and the control plane it
    // started (their `Drop` kills them), instead of leaving them running.
    let interruptible = async {
        tokio::select! {
            result = run(opts) => result,
            () = interrupted() => Err("interrupted".into()),
        }
    };
    match rt.block_on(interruptible) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccm-bench: ERROR: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn interrupted() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

fn progress(msg: impl std::fmt::Display) {
    eprintln!("ccm-bench: {msg}");
}

async fn run(opts: Options) -> Result<()> {
    if let Some(path) = &opts.replot {
        let report: Report = serde_json::from_str(&std::fs::read_to_string(path)?)?;
        print!("{}", table(&report));
        return write_svg(&opts, &report);
    }
    if opts.nodes == 0 {
        return Err("--nodes must be at least 1".into());
    }
    let mut binaries = Vec::new();
    for name in &opts.ccm {
        let binary = match name.as_str() {
            "rust" => rust_binary(&opts)?,
            "go" => go_binary(&opts)?,
            other => return Err(format!("unknown --ccm {other:?}: use rust, go").into()),
        };
        progress(format_args!("{name}: {}", binary.display()));
        binaries.push((name, binary));
    }
    let mut results = Vec::new();
    for repeat in 0..opts.repeat as usize {
        // Alternate the order, so that neither CCM always runs on a warmer machine.
        let mut order: Vec<&(&String, PathBuf)> = binaries.iter().collect();
        if repeat % 2 == 1 {
            order.reverse();
        }
        for (name, binary) in order {
            if opts.repeat > 1 {
                progress(format_args!(
                    "run {} of {}: {name}",
                    repeat + 1,
                    opts.repeat
                ));
            }
            let mut result = bench_one(&opts, name, binary).await?;
            result.repeat = repeat;
            results.push(result);
        }
    }
    let report = Report {
        settings: Settings {
            nodes: opts.nodes,
            services: opts.services,
            new_nodes: if opts.services > 0 { opts.new_nodes } else { 0 },
            routes: opts.routes,
            idle_secs: opts.idle_secs,
            qps: opts.qps,
            burst: opts.burst,
            workers: opts.workers,
            latency_ms: opts.latency_ms,
            driver_watch: opts.driver_watch.clone(),
            content_type: opts.content_type.clone(),
        },
        machine: Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
        },
        results,
    };
    print!("{}", table(&report));
    if let Some(dir) = opts.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&opts.out, serde_json::to_string_pretty(&report)?)?;
    progress(format_args!("wrote {}", opts.out.display()));
    write_svg(&opts, &report)
}

fn write_svg(opts: &Options, report: &Report) -> Result<()> {
    if let Some(dir) = opts.svg.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&opts.svg, svg(report))?;
    progress(format_args!("wrote {}", opts.svg.display()));
    Ok(())
}

/// The workspace root: `CARGO_MANIFEST_DIR/../..`.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds our CCM as its image ships it (`scripts/images.sh`, whose `STATIC_RUSTFLAGS` these
/// are): release, statically linked, as the Go reference is (`CGO_ENABLED=0`), its
/// relocations packed. A dynamically linked binary maps the C library besides, about 2 MiB
/// of peak RSS that a deployed CCM does not carry.
fn rust_binary(opts: &Options) -> Result<PathBuf> {
    if let Some(path) = &opts.rust_ccm {
        return Ok(path.clone());
    }
    let triple = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    progress(format_args!(
        "building fake-cloud-controller-manager (release, static, {triple})"
    ));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace_root())
        .env(
            format!(
                "CARGO_TARGET_{}_RUSTFLAGS",
                triple.to_uppercase().replace('-', "_")
            ),
            "-C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs",
        )
        .args([
            "build",
            "--release",
            "--target",
            &triple,
            "-p",
            "ccm-fake-cloud",
            "--bin",
            "fake-cloud-controller-manager",
        ])
        .status()?;
    if !status.success() {
        return Err("cargo build of fake-cloud-controller-manager failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    Ok(target
        .join(&triple)
        .join("release/fake-cloud-controller-manager"))
}

fn go_binary(opts: &Options) -> Result<PathBuf> {
    if let Some(path) = &opts.go_ccm {
        return Ok(path.clone());
    }
    progress("building the Go reference CCM (bench/build-go-reference.sh)");
    let out = Command::new(workspace_root().join("bench/build-go-reference.sh"))
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err("bench/build-go-reference.sh failed".into());
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// Creates `count` objects, 16 requests at a time.
async fn create_all<K, F>(api: Api<K>, count: usize, make: F) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
    F: Fn(usize) -> K,
{
    stream::iter(0..count)
        .map(|i| {
            let (api, obj) = (api.clone(), make(i));
            async move { api.create(&PostParams::default(), &obj).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .map(drop)
}

/// Records a scenario's result; false when it timed out (the CCM's later scenarios are
/// skipped).
fn record(result: &mut CcmResult, scenario: &str, s: ScenarioResult) -> bool {
    let finished = !s.timed_out;
    if !finished {
        result.timed_out = Some(scenario.to_owned());
    }
    result.scenarios.insert(scenario.to_owned(), s);
    finished
}

async fn bench_one(opts: &Options, name: &str, binary: &Path) -> Result<CcmResult> {
    progress(format_args!("{name}: starting a control plane"));
    let dir = tempfile::tempdir()?;
    // The audit log: the CCM's PATCH/UPDATE of nodes/status, with their bodies.
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(&policy, audit::policy())?;
    let audit_path = dir.path().join("audit.log");
    let mut builder = ControlPlane::builder();
    for arg in audit::apiserver_args(&policy, &audit_path) {
        builder = builder.apiserver_arg(arg);
    }
    let cp = builder.start().await?;
    let client = cp.client()?;
    // The CCM runs as a user of its own, so the audit policy can pick out its requests.
    let kubeconfig = cp.kubeconfig_for_user(audit::USER, &["system:masters"])?;
    let mut audit = AuditLog::new(audit_path);
    let servers: Vec<u32> = {
        let (etcd, apiserver) = cp.process_ids();
        etcd.into_iter().chain(apiserver).collect()
    };
    let mut ccm = Process::start(opts, name, binary, &kubeconfig, dir.path())?;
    let rss = RssSampler::start(ccm.pid(), Instant::now(), Duration::from_millis(250));
    let mut result = CcmResult {
        name: name.to_owned(),
        binary: binary.display().to_string(),
        ..CcmResult::default()
    };

    // Ready: /metrics answers; then let the informers sync and the counters settle.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        ccm.check_running()?;
        if ccm.scrape().is_ok() {
            break;
        }
        if Instant::now() > deadline {
            return Err(
                format!("{name}: /metrics never answered; log:\n{}", ccm.log_tail()).into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    progress(format_args!("{name}: running"));

    let protobuf = opts.driver_watch == "protobuf";
    // Scenario 1: node initialisation.
    let nodes: Api<Node> = Api::all(client.clone());
    let n = opts.nodes;
    let s1 = measure(
        opts,
        &mut ccm,
        (&mut audit, &servers),
        "nodes initialised",
        n,
        create_all(nodes.clone(), n, |i| tainted_node("bench-node", i)),
        watch_done(nodes.clone(), node_initialised, protobuf),
    )
    .await?;
    let mut going = record(&mut result, "node_init", s1);

    // Scenario 2: load balancers, then new Nodes for all of them.
    if going && opts.services > 0 {
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        let m = opts.services;
        let s2 = measure(
            opts,
            &mut ccm,
            (&mut audit, &servers),
            "LBs with ingress",
            m,
            create_all(services.clone(), m, lb_service),
            watch_done(services.clone(), has_ingress, protobuf),
        )
        .await?;
        going = record(&mut result, "load_balancers", s2);
        if going && opts.new_nodes > 0 {
            let k = opts.new_nodes;
            let endpoint = ccm.endpoint;
            let s2b = measure(
                opts,
                &mut ccm,
                (&mut audit, &servers),
                "new Nodes in every LB",
                k,
                create_all(nodes.clone(), k, |i| tainted_node("bench-new-node", i)),
                poll_lb_hosts(endpoint, m, n),
            )
            .await?;
            going = record(&mut result, "lb_new_nodes", s2b);
        }
    }

    // Scenario 3: routes.
    if going && opts.routes > 0 {
        let r = opts.routes;
        let s3 = measure(
            opts,
            &mut ccm,
            (&mut audit, &servers),
            "Nodes with a route",
            r,
            create_all(nodes.clone(), r, route_node),
            watch_done(nodes.clone(), node_has_route, protobuf),
        )
        .await?;
        going = record(&mut result, "routes", s3);
    }

    // Scenario 4: idle.
    if going && opts.idle_secs > 0 {
        result.idle = Some(idle(opts, &mut ccm, &mut audit, &rss).await?);
    }
    if let Some(scenario) = &result.timed_out {
        progress(format_args!(
            "{name}: skipped the scenarios after {scenario} (timed out); collecting peak RSS and \
             CPU, then going on"
        ));
    }

    ccm.check_running()?;
    result.peak_rss_mib = ccm.peak_rss_mib()?;
    result.total_cpu_seconds = ccm.cpu_seconds()?;
    let last = ccm.scrape()?;
    result.duplicate_route_creates = last.sum(DUPLICATE_ROUTE_CREATES);
    result.redundant_load_balancer_updates = Some(last.sum(REDUNDANT_LB_UPDATES));
    let conditions = audit.read_new()?;
    result.condition_writes = Some(conditions.writes);
    result.duplicate_condition_writes = Some(conditions.duplicates);
    progress(format_args!(
        "{name}: whole run: {} redundant LB updates, {} Node condition writes ({} duplicates), \
         {} duplicate route creates",
        last.sum(REDUNDANT_LB_UPDATES),
        conditions.writes,
        conditions.duplicates,
        result.duplicate_route_creates
    ));
    result.rss = rss.finish();
    drop(ccm);
    drop(cp);
    Ok(result)
}

/// Scenario 4: waits until the CCM's API requests stop (at most 60 s), then measures
/// `--idle-secs` with no change.
async fn idle(
    opts: &Options,
    ccm: &mut Process,
    audit: &mut AuditLog,
    rss: &RssSampler,
) -> Result<IdleResult> {
    let name = ccm.name.clone();
    progress(format_args!(
        "{name}: waiting for quiet before the idle scenario"
    ));
    settle(ccm, Duration::from_secs(5), Duration::from_secs(60)).await?;
    let before = ccm.scrape()?;
    let cpu_before = ccm.cpu_seconds()?;
    let conditions_before = audit.read_new()?;
    let samples_before = rss.samples().len();
    let start = Instant::now();
    let total = Duration::from_secs(opts.idle_secs);
    while start.elapsed() < total {
        ccm.check_running()?;
        tokio::time::sleep(Duration::from_secs(5).min(total.saturating_sub(start.elapsed()))).await;
        progress(format_args!(
            "{name}: idle {:.0}/{} s",
            start.elapsed().as_secs_f64(),
            opts.idle_secs
        ));
    }
    let seconds = start.elapsed().as_secs_f64();
    let after = ccm.scrape()?;
    let conditions = audit.read_new()? - conditions_before;
    let per_minute = 60.0 / seconds;
    let idle = IdleResult {
        nodes: opts.nodes + if opts.services > 0 { opts.new_nodes } else { 0 } + opts.routes,
        services: opts.services,
        seconds,
        cpu_seconds: ccm.cpu_seconds()? - cpu_before,
        api_requests_per_minute: (after.sum(API_REQUESTS) - before.sum(API_REQUESTS)) * per_minute,
        cloud_calls_per_minute: delta(&after.cloud_calls(), &before.cloud_calls())
            .into_iter()
            .map(|(k, v)| (k, v * per_minute))
            .collect(),
        max_rss_mib: rss.samples()[samples_before.min(rss.samples().len())..]
            .iter()
            .map(|(_, m)| *m)
            .fold(0.0, f64::max),
        redundant_load_balancer_updates: after.sum(REDUNDANT_LB_UPDATES)
            - before.sum(REDUNDANT_LB_UPDATES),
        condition_writes: conditions.writes,
        duplicate_condition_writes: conditions.duplicates,
    };
    progress(format_args!(
        "{name}: idle {seconds:.0} s: {:.2} CPU s, {:.1} API requests/min, {:.1} cloud calls/min",
        idle.cpu_seconds,
        idle.api_requests_per_minute,
        idle.cloud_calls_per_minute.values().sum::<f64>()
    ));
    Ok(idle)
}

/// What "still working" counts: every API request, and every cloud call except those the
/// periodic loops make whatever happens (route listing, instance checks).
fn activity(scrape: &Scrape) -> f64 {
    let cloud: f64 = scrape
        .cloud_calls()
        .iter()
        .filter(|(m, _)| {
            !matches!(
                m.as_str(),
                "list_routes" | "instance_exists" | "instance_shutdown"
            )
        })
        .map(|(_, v)| v)
        .sum();
    scrape.sum(API_REQUESTS) + cloud
}

/// Waits until [`activity`] has not moved for `quiet` (at most `max`).
async fn settle(ccm: &mut Process, quiet: Duration, max: Duration) -> Result<()> {
    let deadline = Instant::now() + max;
    let mut last = activity(&ccm.scrape()?);
    let mut since = Instant::now();
    while since.elapsed() < quiet && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        ccm.check_running()?;
        let now = activity(&ccm.scrape()?);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    Ok(())
}

/// Runs `create`, waits until `done` has seen `count` objects done, and measures. At
/// `--timeout-secs` it stops waiting and returns what it measured so far, marked
/// `timed_out`; a CCM that exits, a failed create or a watch that ends are errors.
/// Runs one scenario: `create` the objects while `done` counts those finished; measured
/// on the CCM (`/metrics`, `/proc`), and on the API server through its audit log and the
/// CPU time of its processes (`servers`: etcd's and kube-apiserver's pids).
async fn measure<C, D>(
    opts: &Options,
    ccm: &mut Process,
    (audit, servers): (&mut AuditLog, &[u32]),
    what: &str,
    count: usize,
    create: C,
    done: D,
) -> Result<ScenarioResult>
where
    C: Future<Output = Result<(), kube::Error>> + Send + 'static,
    D: futures::Stream<Item = usize> + Send + 'static,
{
    let name = ccm.name.clone();
    let before = ccm.scrape()?;
    let cpu_before = ccm.cpu_seconds()?;
    let server_cpu = || -> Result<f64> { servers.iter().map(|&pid| cpu_seconds(pid)).sum() };
    let server_cpu_before = server_cpu()?;
    let conditions_before = audit.read_new()?;
    audit.take_requests();
    let start = Instant::now();
    let mut creator = tokio::spawn(async move {
        create.await?;
        Ok::<_, kube::Error>(start.elapsed().as_secs_f64())
    });
    let mut done = Box::pin(done);
    let mut progress_log = vec![(0.0, 0)];
    let mut last_print = Instant::now();
    let deadline = start + Duration::from_secs(opts.timeout_secs);
    let mut seen = 0;
    let mut create_seconds = None;
    let mut timed_out = false;
    while seen < count {
        // A failed create ends the scenario now rather than at the timeout.
        if create_seconds.is_none() && creator.is_finished() {
            create_seconds = Some((&mut creator).await??);
        }
        let next = tokio::time::timeout(Duration::from_secs(1), done.next()).await;
        ccm.check_running()?;
        match next {
            Ok(Some(n)) => {
                if n != seen {
                    seen = n;
                    progress_log.push((start.elapsed().as_secs_f64(), n));
                }
            }
            Ok(None) => return Err("the watch ended".into()),
            Err(_) => {}
        }
        if Instant::now() > deadline {
            progress(format_args!(
                "{name}: TIMED OUT: only {seen}/{count} {what} after {} s; recorded as \
                 incomplete, {name}'s later scenarios skipped; log:\n{}",
                opts.timeout_secs,
                ccm.log_tail()
            ));
            timed_out = true;
            break;
        }
        if last_print.elapsed() >= Duration::from_secs(2) {
            progress(format_args!(
                "{name}: {seen}/{count} {what} ({:.1} s)",
                start.elapsed().as_secs_f64()
            ));
            last_print = Instant::now();
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let create_seconds = match create_seconds {
        Some(s) => s,
        None if timed_out => {
            // Still creating: stop it; the creates so far took the whole time.
            creator.abort();
            seconds
        }
        None => creator.await??,
    };
    if !timed_out {
        // Let the last writes land in the counters, Go's asynchronous events and follow-up
        // cloud calls included: wait until nothing has moved for 1 s (at most 10 s).
        settle(ccm, Duration::from_secs(1), Duration::from_secs(10)).await?;
    }
    let after = ccm.scrape()?;
    let server_cpu_seconds = server_cpu()? - server_cpu_before;
    let conditions = audit.read_new()? - conditions_before;
    let requests = audit.take_requests();
    let by_series = delta(&after.series(API_REQUESTS), &before.series(API_REQUESTS));
    let api_requests: f64 = by_series.values().sum();
    let cloud_calls = delta(&after.cloud_calls(), &before.cloud_calls());
    let cpu_seconds = ccm.cpu_seconds()? - cpu_before;
    let redundant = after.sum(REDUNDANT_LB_UPDATES) - before.sum(REDUNDANT_LB_UPDATES);
    progress(format_args!(
        "{name}: {seen}/{count} {what} in {seconds:.2} s, {api_requests} API requests, {} cloud \
         calls, {cpu_seconds:.2} CPU s, {redundant} redundant LB updates, {} Node condition \
         writes ({} duplicates); API server and etcd: {server_cpu_seconds:.2} CPU s",
        cloud_calls.values().sum::<f64>(),
        conditions.writes,
        conditions.duplicates,
    ));
    for (kind, r) in &requests {
        progress(format_args!(
            "{name}:   {kind}: {} ({} failed), server {:.2} ms each, body {:.0} B each",
            r.count,
            r.failed,
            1000.0 * r.server_seconds / r.count.max(1.0),
            r.body_bytes / r.count.max(1.0)
        ));
    }
    Ok(ScenarioResult {
        objects: count,
        seconds,
        create_seconds,
        api_requests,
        api_requests_per_object: api_requests / seen.max(1) as f64,
        cpu_seconds,
        server_cpu_seconds: Some(server_cpu_seconds),
        requests,
        api_requests_by_series: by_series,
        cloud_calls,
        duplicate_route_creates: after.sum(DUPLICATE_ROUTE_CREATES)
            - before.sum(DUPLICATE_ROUTE_CREATES),
        redundant_load_balancer_updates: redundant,
        condition_writes: conditions.writes,
        duplicate_condition_writes: conditions.duplicates,
        timed_out,
        done: seen,
        progress: progress_log,
    })
}
