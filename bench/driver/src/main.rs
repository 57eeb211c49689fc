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
//!    measured: the time until every one has an ingress IP, and the API requests.
//! 3. routes (`--routes` > 0): that many untainted Nodes with a podCIDR are created;
//!    measured: the time until the route controller has marked each one's network
//!    available (`NetworkUnavailable=False`, set once its route exists).
//!
//! For each CCM: CPU seconds (`utime + stime` from `/proc/<pid>/stat`) spent in each
//! scenario and peak RSS (`VmHWM` from `/proc/<pid>/status`). Progress goes to stderr; a
//! table with the ratio Rust/Go to stdout; everything to `--out` as JSON.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ccm_test::ControlPlane;
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node, NodeSpec, Service, ServicePort, ServiceSpec, Taint};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde::{Deserialize, Serialize};

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

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
    /// Nodes with a podCIDR created in scenario 3 (routes); 0 skips it.
    #[arg(long, default_value_t = 0)]
    routes: usize,
    /// Which CCMs to run, in order: `rust`, `go`, or both (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "rust,go")]
    ccm: Vec<String>,
    /// `--kube-api-qps` of both CCMs.
    #[arg(long, default_value_t = 20.0)]
    qps: f64,
    /// `--kube-api-burst` of both CCMs.
    #[arg(long, default_value_t = 30)]
    burst: u32,
    /// `--concurrent-node-syncs` and `--concurrent-service-syncs` of both CCMs.
    #[arg(long, default_value_t = 1)]
    workers: u32,
    /// Latency of every fake-cloud call, in milliseconds (`latencyMs`).
    #[arg(long, default_value_t = 5)]
    latency_ms: u64,
    /// Our CCM binary; default: `cargo build --release` it and use `target/release/`.
    #[arg(long)]
    rust_ccm: Option<PathBuf>,
    /// The Go reference binary; default: what `bench/build-go-reference.sh` prints.
    #[arg(long)]
    go_ccm: Option<PathBuf>,
    /// Give up on a scenario after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Where the JSON results go.
    #[arg(long, default_value = "target/bench/results.json")]
    out: PathBuf,
    /// Run nothing: read results JSON written before, print its table and draw its picture.
    #[arg(long)]
    replot: Option<PathBuf>,
    /// Where the picture goes: objects done over time, per scenario and CCM (SVG).
    #[arg(long, default_value = "target/bench/progress.svg")]
    svg: PathBuf,
}

/// What one CCM did in one scenario.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
struct ScenarioResult {
    /// Objects the scenario waited for.
    objects: usize,
    /// Seconds from the first create to the last object being done.
    seconds: f64,
    /// Seconds the driver took to create the objects (16 requests at a time, no client
    /// rate limit): a yardstick of what the apiserver takes on this machine.
    create_seconds: f64,
    /// API requests the CCM made during the scenario (all verbs and resources).
    api_requests: f64,
    /// `api_requests / objects`.
    api_requests_per_object: f64,
    /// CPU seconds (user + system) the CCM spent during the scenario.
    cpu_seconds: f64,
    /// `api_requests` by series of `rest_client_requests_total` (labels minus `host`).
    api_requests_by_series: BTreeMap<String, f64>,
    /// `(seconds since start, objects done)`, sampled as progress was seen.
    progress: Vec<(f64, usize)>,
}

/// What one CCM did in the whole run.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
struct CcmResult {
    /// `rust` or `go`.
    name: String,
    /// The binary that ran.
    binary: String,
    /// Scenario name → result.
    scenarios: BTreeMap<String, ScenarioResult>,
    /// Peak resident memory of the process over the run (VmHWM), in MiB.
    peak_rss_mib: f64,
    /// CPU seconds over the whole run, start-up included.
    total_cpu_seconds: f64,
}

/// The JSON written to `--out`.
#[derive(Serialize, Deserialize, Debug)]
struct Report {
    settings: Settings,
    machine: Machine,
    results: Vec<CcmResult>,
}

#[derive(Serialize, Deserialize, Debug)]
struct Settings {
    nodes: usize,
    services: usize,
    #[serde(default)]
    routes: usize,
    qps: f64,
    burst: u32,
    workers: u32,
    latency_ms: u64,
}

#[derive(Serialize, Deserialize, Debug)]
struct Machine {
    cpus: usize,
    kernel: String,
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
    match rt.block_on(run(opts)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccm-bench: ERROR: {e}");
            std::process::ExitCode::FAILURE
        }
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
    let mut results = Vec::new();
    for name in &opts.ccm {
        let binary = match name.as_str() {
            "rust" => rust_binary(&opts)?,
            "go" => go_binary(&opts)?,
            other => return Err(format!("unknown --ccm {other:?}: use rust, go").into()),
        };
        progress(format_args!("{name}: {}", binary.display()));
        results.push(bench_one(&opts, name, &binary).await?);
    }
    let report = Report {
        settings: Settings {
            nodes: opts.nodes,
            services: opts.services,
            routes: opts.routes,
            qps: opts.qps,
            burst: opts.burst,
            workers: opts.workers,
            latency_ms: opts.latency_ms,
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

/// A line chart (hand-written SVG, no dependency): the fraction of objects done over
/// time, one panel per scenario, one line per CCM (Rust orange, Go blue).
fn svg(report: &Report) -> String {
    const W: f64 = 640.0;
    const H: f64 = 260.0;
    const M: f64 = 50.0;
    let mut scenarios: Vec<&String> = report
        .results
        .iter()
        .flat_map(|r| r.scenarios.keys())
        .collect();
    scenarios.sort();
    scenarios.dedup();
    let height = H * scenarios.len().max(1) as f64;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (i, name) in scenarios.iter().enumerate() {
        let top = H * i as f64;
        let (x0, x1, y0, y1) = (M, W - 20.0, top + H - 40.0, top + 30.0);
        let runs: Vec<(&str, &ScenarioResult)> = report
            .results
            .iter()
            .filter_map(|r| r.scenarios.get(*name).map(|s| (r.name.as_str(), s)))
            .collect();
        let t_max = runs
            .iter()
            .map(|(_, s)| s.seconds)
            .fold(0.0_f64, f64::max)
            .max(0.001);
        let objects = runs.first().map_or(0, |(_, s)| s.objects);
        out += &format!(
            "<text x=\"{M}\" y=\"{}\" font-size=\"14\">{name}: {objects} objects done over time \
             ({} nodes, QPS {}, {} worker(s), latency {} ms)</text>\n",
            top + 18.0,
            report.settings.nodes,
            report.settings.qps,
            report.settings.workers,
            report.settings.latency_ms
        );
        out += &format!(
            "<polyline fill=\"none\" stroke=\"black\" points=\"{x0},{y1} {x0},{y0} {x1},{y0}\"/>\n\
             <text x=\"{x0}\" y=\"{}\">0</text><text x=\"{x1}\" y=\"{}\" text-anchor=\"end\">{t_max:.1} s</text>\n\
             <text x=\"{}\" y=\"{y0}\" text-anchor=\"end\">0</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{objects}</text>\n",
            y0 + 15.0,
            y0 + 15.0,
            x0 - 4.0,
            x0 - 4.0,
            y1 + 4.0
        );
        for (j, (ccm, s)) in runs.iter().enumerate() {
            let colour = if *ccm == "rust" { "#d9531e" } else { "#1f77b4" };
            let points: Vec<String> = s
                .progress
                .iter()
                .map(|(t, n)| {
                    let x = x0 + (x1 - x0) * t / t_max;
                    let y = y0 - (y0 - y1) * (*n as f64) / (s.objects.max(1) as f64);
                    format!("{x:.1},{y:.1}")
                })
                .collect();
            out += &format!(
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>\n\
                 <text x=\"{}\" y=\"{}\" fill=\"{colour}\">{ccm}: {:.2} s</text>\n",
                points.join(" "),
                x0 + 10.0,
                y1 + 15.0 * (j as f64 + 1.0),
                s.seconds
            );
        }
    }
    out += "</svg>\n";
    out
}

/// The workspace root: `CARGO_MANIFEST_DIR/../..`.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_binary(opts: &Options) -> Result<PathBuf> {
    if let Some(path) = &opts.rust_ccm {
        return Ok(path.clone());
    }
    progress("building fake-cloud-controller-manager (release)");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "build",
            "--release",
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
    Ok(target.join("release/fake-cloud-controller-manager"))
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

/// A free loopback port (bound, read, released).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A running CCM; killed on drop.
struct Process {
    child: Child,
    port: u16,
    https: bool,
    log: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    fn start(
        opts: &Options,
        name: &str,
        binary: &Path,
        cp: &ControlPlane,
        dir: &Path,
    ) -> Result<Self> {
        let config = dir.join("fake.yaml");
        std::fs::write(
            &config,
            format!("nodesAreInstances: true\nlatencyMs: {}\n", opts.latency_ms),
        )?;
        let port = free_port()?;
        let mut args = vec![
            "--cloud-provider=fake".to_owned(),
            format!("--cloud-config={}", config.display()),
            format!("--kubeconfig={}", cp.kubeconfig_path().display()),
            // Room for 32768 /24 pod CIDRs (scenario 3).
            "--cluster-cidr=10.128.0.0/9".to_owned(),
            // Go runs the route controller only with both; ours ignores the first.
            "--allocate-node-cidrs=true".to_owned(),
            "--configure-cloud-routes=true".to_owned(),
            "--leader-elect=false".to_owned(),
            format!("--kube-api-qps={}", opts.qps),
            format!("--kube-api-burst={}", opts.burst),
            format!("--concurrent-node-syncs={}", opts.workers),
            format!("--concurrent-service-syncs={}", opts.workers),
            "--node-monitor-period=5s".to_owned(),
            "--route-reconciliation-period=10s".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
        ];
        let https = name == "go";
        if https {
            // Go serves HTTPS with delegated authn/authz; without the authn/authz
            // kubeconfigs it serves anonymous requests to the always-allowed paths only.
            args.extend([
                format!("--cert-dir={}", dir.join("certs").display()),
                "--authentication-skip-lookup=true".to_owned(),
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".to_owned(),
            ]);
        } else {
            args.push("--insecure-serving".to_owned());
        }
        let log = dir.join(format!("{name}-ccm.log"));
        let child = Command::new(binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        Ok(Self {
            child,
            port,
            https,
            log,
        })
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The sum of every `rest_client_requests_total` series on `/metrics`.
    fn api_requests(&self) -> Result<f64> {
        Ok(self.api_request_series()?.values().sum())
    }

    /// Every `rest_client_requests_total` series on `/metrics`: labels → value.
    fn api_request_series(&self) -> Result<BTreeMap<String, f64>> {
        let scheme = if self.https { "https" } else { "http" };
        let out = Command::new("curl")
            .args(["-sSfk", "--max-time", "10"])
            .arg(format!("{scheme}://127.0.0.1:{}/metrics", self.port))
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "GET /metrics failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        Ok(metric_series(
            &String::from_utf8_lossy(&out.stdout),
            "rest_client_requests_total",
        ))
    }

    /// CPU seconds (user + system) so far.
    fn cpu_seconds(&self) -> Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        // Fields after the `(comm)`, which may hold spaces: state is field 3; utime 14, stime 15.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = fields
            .get(11)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
            + fields
                .get(12)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0);
        Ok(ticks / clock_ticks())
    }

    /// Peak resident memory so far (VmHWM), in MiB.
    fn peak_rss_mib(&self) -> Result<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .ok_or("no VmHWM in /proc/<pid>/status")?;
        Ok(kib / 1024.0)
    }

    fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            return Err(format!("the CCM exited ({status}); log:\n{}", self.log_tail()).into());
        }
        Ok(())
    }
}

/// `sysconf(_SC_CLK_TCK)` via `getconf` (no unsafe code); 100 when unknown.
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Every sample of `name` in Prometheus text: its labels (`{...}`, or empty) → value.
/// Labels are kept as written, minus `host` (Go's names the apiserver's random port).
fn metric_series(text: &str, name: &str) -> BTreeMap<String, f64> {
    let mut series = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let Some((labels, value)) = rest.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let labels: Vec<&str> = labels
            .trim()
            .trim_start_matches('{')
            .trim_end_matches('}')
            .split(',')
            .filter(|l| !l.is_empty() && !l.starts_with("host="))
            .collect();
        *series.entry(labels.join(",")).or_insert(0.0) += value;
    }
    series
}

async fn bench_one(opts: &Options, name: &str, binary: &Path) -> Result<CcmResult> {
    progress(format_args!("{name}: starting a control plane"));
    let cp = ControlPlane::start().await?;
    let client = cp.client()?;
    let dir = tempfile::tempdir()?;
    let mut ccm = Process::start(opts, name, binary, &cp, dir.path())?;
    let mut result = CcmResult {
        name: name.to_owned(),
        binary: binary.display().to_string(),
        ..CcmResult::default()
    };

    // Ready: /metrics answers; then let the informers sync and the counters settle.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        ccm.check_running()?;
        if ccm.api_requests().is_ok() {
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

    // Scenario 1: node initialisation.
    let nodes: Api<Node> = Api::all(client.clone());
    let s1 = measure(
        opts,
        name,
        &mut ccm,
        "nodes initialised",
        opts.nodes,
        {
            let nodes = nodes.clone();
            let n = opts.nodes;
            async move {
                stream::iter(0..n)
                    .map(|i| {
                        let nodes = nodes.clone();
                        async move { nodes.create(&PostParams::default(), &tainted_node(i)).await }
                    })
                    .buffer_unordered(16)
                    .try_collect::<Vec<_>>()
                    .await
                    .map(|_| ())
            }
        },
        watch_done(nodes.clone(), node_initialised),
    )
    .await?;
    result.scenarios.insert("node_init".into(), s1);

    // Scenario 2: load balancers.
    if opts.services > 0 {
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        let m = opts.services;
        let s2 = measure(
            opts,
            name,
            &mut ccm,
            "LBs with ingress",
            m,
            {
                let services = services.clone();
                async move {
                    stream::iter(0..m)
                        .map(|i| {
                            let services = services.clone();
                            async move {
                                services
                                    .create(&PostParams::default(), &lb_service(i))
                                    .await
                            }
                        })
                        .buffer_unordered(16)
                        .try_collect::<Vec<_>>()
                        .await
                        .map(|_| ())
                }
            },
            watch_done(services.clone(), service_has_ingress),
        )
        .await?;
        result.scenarios.insert("load_balancers".into(), s2);
    }

    // Scenario 3: routes.
    if opts.routes > 0 {
        let n = opts.routes;
        let s3 = measure(
            opts,
            name,
            &mut ccm,
            "Nodes with a route",
            n,
            {
                let nodes = nodes.clone();
                async move {
                    stream::iter(0..n)
                        .map(|i| {
                            let nodes = nodes.clone();
                            async move { nodes.create(&PostParams::default(), &route_node(i)).await }
                        })
                        .buffer_unordered(16)
                        .try_collect::<Vec<_>>()
                        .await
                        .map(|_| ())
                }
            },
            watch_done(nodes.clone(), node_has_route),
        )
        .await?;
        result.scenarios.insert("routes".into(), s3);
    }

    result.peak_rss_mib = ccm.peak_rss_mib()?;
    result.total_cpu_seconds = ccm.cpu_seconds()?;
    drop(ccm);
    drop(cp);
    Ok(result)
}

/// Runs `create`, waits until `done` has seen `count` objects done, and measures.
async fn measure<C, D>(
    opts: &Options,
    name: &str,
    ccm: &mut Process,
    what: &str,
    count: usize,
    create: C,
    done: D,
) -> Result<ScenarioResult>
where
    C: Future<Output = Result<(), kube::Error>> + Send + 'static,
    D: futures::Stream<Item = usize> + Send + 'static,
{
    let requests_before = ccm.api_request_series()?;
    let cpu_before = ccm.cpu_seconds()?;
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
            return Err(format!(
                "{name}: only {seen}/{count} {what} after {} s; log:\n{}",
                opts.timeout_secs,
                ccm.log_tail()
            )
            .into());
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
        None => creator.await??,
    };
    // Let the last writes land in the counters, Go's asynchronous events included: wait
    // until the total has not moved for 1 s (at most 10 s).
    let settle_deadline = Instant::now() + Duration::from_secs(10);
    let mut last = ccm.api_requests()?;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = ccm.api_requests()?;
        if now == last || Instant::now() > settle_deadline {
            break;
        }
        last = now;
    }
    let after = ccm.api_request_series()?;
    let by_series: BTreeMap<String, f64> = after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v - requests_before.get(k).copied().unwrap_or(0.0),
            )
        })
        .filter(|(_, v)| *v != 0.0)
        .collect();
    let api_requests: f64 = by_series.values().sum();
    let cpu_seconds = ccm.cpu_seconds()? - cpu_before;
    progress(format_args!(
        "{name}: {count} {what} in {seconds:.2} s, {api_requests} API requests, {cpu_seconds:.2} CPU s"
    ));
    Ok(ScenarioResult {
        objects: count,
        seconds,
        create_seconds,
        api_requests,
        api_requests_per_object: api_requests / count as f64,
        cpu_seconds,
        api_requests_by_series: by_series,
        progress: progress_log,
    })
}

/// A stream of "how many objects are done", from a watch of `api`.
fn watch_done<K>(api: Api<K>, is_done: fn(&K) -> bool) -> impl futures::Stream<Item = usize> + Send
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let mut done: HashSet<String> = HashSet::new();
    watcher(api, watcher::Config::default()).filter_map(move |event| {
        let changed = match event {
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                let name = obj.meta().name.clone().unwrap_or_default();
                if is_done(&obj) {
                    done.insert(name);
                } else {
                    done.remove(&name);
                }
                true
            }
            Ok(watcher::Event::Delete(obj)) => {
                done.remove(obj.meta().name.as_deref().unwrap_or_default());
                true
            }
            Ok(_) | Err(_) => false,
        };
        futures::future::ready(changed.then_some(done.len()))
    })
}

fn node_initialised(node: &Node) -> bool {
    let spec = node.spec.as_ref();
    spec.and_then(|s| s.provider_id.as_deref())
        .is_some_and(|id| !id.is_empty())
        && !spec
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == TAINT_UNINITIALIZED))
}

fn service_has_ingress(service: &Service) -> bool {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
}

fn tainted_node(i: usize) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(format!("bench-node-{i:05}"));
    node.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: TAINT_UNINITIALIZED.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }]),
        ..NodeSpec::default()
    });
    node
}

/// A Node with a podCIDR (from the cluster CIDR 10.128.0.0/9) and no taint, as a
/// kubelet registers it once initialised; its route is the route controller's work.
fn route_node(i: usize) -> Node {
    let cidr = format!("10.{}.{}.0/24", 128 + i / 256, i % 256);
    let mut node = Node::default();
    node.metadata.name = Some(format!("bench-route-node-{i:05}"));
    node.spec = Some(NodeSpec {
        pod_cidr: Some(cidr.clone()),
        pod_cidrs: Some(vec![cidr]),
        ..NodeSpec::default()
    });
    node
}

/// The route controller marks a Node's network available once its route exists.
/// Counts only the scenario's Nodes: the other Nodes have no podCIDR, so no route.
fn node_has_route(node: &Node) -> bool {
    node.metadata
        .name
        .as_deref()
        .is_some_and(|n| n.starts_with("bench-route-node-"))
        && node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "NetworkUnavailable" && c.status == "False")
            })
}

fn lb_service(i: usize) -> Service {
    let mut svc = Service::default();
    svc.metadata.name = Some(format!("bench-lb-{i:05}"));
    svc.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".into()),
        ports: Some(vec![ServicePort {
            port: 80,
            protocol: Some("TCP".into()),
            ..ServicePort::default()
        }]),
        ..ServiceSpec::default()
    });
    svc
}

/// The comparison table, one row per measure, with Rust/Go when both ran.
fn table(report: &Report) -> String {
    let get = |name: &str| report.results.iter().find(|r| r.name == name);
    let (rust, go) = (get("rust"), get("go"));
    let mut rows: Vec<(String, Option<f64>, Option<f64>)> = Vec::new();
    let mut scenario_names: Vec<&String> = report
        .results
        .iter()
        .flat_map(|r| r.scenarios.keys())
        .collect();
    scenario_names.sort();
    scenario_names.dedup();
    for s in scenario_names {
        let field = |r: Option<&CcmResult>, f: fn(&ScenarioResult) -> f64| {
            r.and_then(|r| r.scenarios.get(s)).map(f)
        };
        rows.push((
            format!("{s}: seconds"),
            field(rust, |x| x.seconds),
            field(go, |x| x.seconds),
        ));
        rows.push((
            format!("{s}: creating them took (s)"),
            field(rust, |x| x.create_seconds),
            field(go, |x| x.create_seconds),
        ));
        rows.push((
            format!("{s}: API requests per object"),
            field(rust, |x| x.api_requests_per_object),
            field(go, |x| x.api_requests_per_object),
        ));
        rows.push((
            format!("{s}: CPU seconds"),
            field(rust, |x| x.cpu_seconds),
            field(go, |x| x.cpu_seconds),
        ));
    }
    rows.push((
        "peak RSS (MiB)".into(),
        rust.map(|r| r.peak_rss_mib),
        go.map(|r| r.peak_rss_mib),
    ));
    rows.push((
        "CPU seconds, whole run".into(),
        rust.map(|r| r.total_cpu_seconds),
        go.map(|r| r.total_cpu_seconds),
    ));
    let cell = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    let mut out = format!(
        "\n{:<42} {:>10} {:>10} {:>9}\n",
        "measure", "rust", "go", "rust/go"
    );
    for (label, r, g) in rows {
        let ratio = match (r, g) {
            (Some(r), Some(g)) if g > 0.0 => format!("{:.2}", r / g),
            _ => "-".to_owned(),
        };
        out += &format!("{label:<42} {:>10} {:>10} {ratio:>9}\n", cell(r), cell(g));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_series_of_a_metric() {
        let text = "# HELP rest_client_requests_total x\n\
                    rest_client_requests_total{code=\"200\",host=\"h\",method=\"GET\"} 3\n\
                    rest_client_requests_total{code=\"201\",host=\"h\",method=\"POST\"} 4.0\n\
                    rest_client_requests_total_other 100\n\
                    rest_client_request_duration_seconds_count{verb=\"GET\"} 9\n";
        let series = metric_series(text, "rest_client_requests_total");
        assert_eq!(series.len(), 2, "{series:?}");
        assert_eq!(series.values().sum::<f64>(), 7.0);
        assert_eq!(series["code=\"201\",method=\"POST\""], 4.0);
    }
}
