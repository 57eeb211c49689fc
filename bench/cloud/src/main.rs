//! `ccm-bench-cloud`: load balancers with a real cloud's timing. Our DO-like CCM and
//! DigitalOcean's own CCM (built from its source by `scripts/peer-digitalocean.sh --bench`)
//! run one at a time, each against a fresh local control plane and a fresh DO-like
//! simulator whose load balancers stay `new` for `--activation-ms` and whose every request
//! takes `--latency-ms`, as a real cloud's do. `--services` LoadBalancer Services are
//! created at once; measured: the time until the first and until every Service has its
//! ingress, the cloud requests per Service by route (counted by the simulator, so both CCMs
//! are counted alike), the CCM's CPU seconds in the scenario and its peak RSS.
//!
//! ```sh
//! cargo run -p ccm-bench-cloud --release -- --services 50
//! scripts/peer-digitalocean.sh SOURCE_DIR --bench --services 50 --repeat 3
//! ```
//!
//! Before the Services, `--nodes` Nodes are registered as kubelets with
//! `--cloud-provider=external` register them (tainted, no provider ID; a droplet of each
//! name in the simulator), and the CCM initialises them: both CCMs resolve the load
//! balancers' droplets from the Nodes' provider IDs then. With `--repeat`, the CCMs
//! alternate (the `--ccm` order, then reversed, ...) and the table shows medians and ranges.
//! Progress goes to stderr, the table to stdout, everything to `--out` as JSON. See
//! docs/benchmarks.md, "Load balancers with a cloud's timing".
#![forbid(unsafe_code)]

mod report;
mod run;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Parser;

use crate::report::{Report, table};

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

/// Command-line options.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "ccm-bench-cloud",
    about = "Load balancers with a cloud's timing: our DO-like CCM against DigitalOcean's own"
)]
pub(crate) struct Options {
    /// LoadBalancer Services created at once.
    #[arg(long, default_value_t = 50)]
    services: usize,
    /// Nodes (and droplets) the load balancers point at.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// How long a new load balancer stays `new` before it is `active` with an address.
    #[arg(long, default_value_t = 1000)]
    activation_ms: u64,
    /// Added to every cloud request (the simulator's `latency_ms` fault).
    #[arg(long, default_value_t = 50)]
    latency_ms: u64,
    /// Load balancers of other clusters in the account before the scenario (tagged for
    /// another cluster): what a CCM that lists the account per Service pays for.
    #[arg(long, default_value_t = 0)]
    existing_load_balancers: usize,
    /// Register the Nodes `Ready`, as running kubelets report them. Without it they have no
    /// `Ready` condition, and both CCMs' node-lifecycle controllers ask the cloud about
    /// every Node each `--node-monitor-period`: requests that grow with the Nodes, not the
    /// Services.
    #[arg(long)]
    ready_nodes: bool,
    /// The simulator's rate limit: requests per `--cloud-rate-window-secs` (DigitalOcean's
    /// is 250 a minute); above it, 429 with `Retry-After`.
    #[arg(long, default_value_t = 5000)]
    cloud_rate_limit: u32,
    /// The window of `--cloud-rate-limit`, in seconds.
    #[arg(long, default_value_t = 1)]
    cloud_rate_window_secs: u64,
    /// Which CCMs to run, in order: `rust` (ours), `digitalocean`, `before` (ours built
    /// from an earlier commit, `--before-ccm`), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "rust")]
    ccm: Vec<String>,
    /// Our `do-like-cloud-controller-manager`; default: `cargo build --release` it.
    #[arg(long)]
    rust_ccm: Option<PathBuf>,
    /// DigitalOcean's `digitalocean-cloud-controller-manager` (needed with
    /// `--ccm digitalocean`; `scripts/peer-digitalocean.sh --bench` builds and passes it).
    #[arg(long)]
    digitalocean_ccm: Option<PathBuf>,
    /// Ours from an earlier commit (needed with `--ccm before`): the same flags and
    /// cloud-config as `rust`, for a before-and-after in one run.
    #[arg(long)]
    before_ccm: Option<PathBuf>,
    /// A line added to our cloud-config (repeatable), e.g. `requestsPerSecond: 10` to
    /// measure another setting.
    #[arg(long = "rust-config")]
    rust_config: Vec<String>,
    /// A flag added to ours (repeatable, `rust` and `before`), e.g.
    /// `--rust-flag=--service-conditions` to measure what a setting costs.
    #[arg(long = "rust-flag", allow_hyphen_values = true)]
    rust_flag: Vec<String>,
    /// `--concurrent-service-syncs` of both CCMs (Go's default, 1).
    #[arg(long, default_value_t = 1)]
    workers: u32,
    /// `--kube-api-qps` and `--kube-api-burst` of both CCMs (default: theirs, Go's 20 and
    /// 30).
    #[arg(long, num_args = 2, value_names = ["QPS", "BURST"])]
    kube_api: Option<Vec<u32>>,
    /// Runs of each CCM, alternating the order.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
    /// Services created at once by the driver (requests in flight).
    #[arg(long, default_value_t = 64)]
    create_concurrency: usize,
    /// Give up on a run after this many seconds (an error: the figures would mean nothing);
    /// the Nodes' initialisation before it gets as long again.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Where the JSON results go.
    #[arg(long, default_value = "target/bench/cloud.json")]
    out: PathBuf,
}

fn main() -> std::process::ExitCode {
    let opts = Options::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ccm-bench-cloud: cannot start a runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Ctrl-C or SIGTERM drops the run, and with it the CCM and the control plane it
    // started (their `Drop` kills them).
    let interruptible = async {
        tokio::select! {
            result = run(opts) => result,
            () = interrupted() => Err("interrupted".into()),
        }
    };
    match rt.block_on(interruptible) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccm-bench-cloud: ERROR: {e}");
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

pub(crate) fn progress(msg: impl std::fmt::Display) {
    eprintln!("ccm-bench-cloud: {msg}");
}

async fn run(opts: Options) -> Result<()> {
    if opts.services == 0 || opts.nodes == 0 {
        return Err("--services and --nodes must be at least 1".into());
    }
    let mut binaries = Vec::new();
    for name in &opts.ccm {
        let binary = match name.as_str() {
            "rust" => rust_binary(&opts)?,
            "digitalocean" => opts
                .digitalocean_ccm
                .clone()
                .ok_or("--ccm digitalocean needs --digitalocean-ccm PATH")?,
            "before" => opts
                .before_ccm
                .clone()
                .ok_or("--ccm before needs --before-ccm PATH")?,
            other => {
                return Err(
                    format!("unknown --ccm {other:?}: use rust, digitalocean, before").into(),
                );
            }
        };
        progress(format_args!("{name}: {}", binary.display()));
        binaries.push((name.clone(), binary));
    }
    let mut results = Vec::new();
    for repeat in 0..opts.repeat as usize {
        let mut order: Vec<&(String, PathBuf)> = binaries.iter().collect();
        if repeat % 2 == 1 {
            order.reverse();
        }
        for (name, binary) in order {
            progress(format_args!(
                "run {} of {}: {name}",
                repeat + 1,
                opts.repeat
            ));
            let mut result = run::one(&opts, name, binary).await?;
            result.repeat = repeat;
            results.push(result);
        }
    }
    let report = Report {
        services: opts.services,
        nodes: opts.nodes,
        activation_ms: opts.activation_ms,
        existing_load_balancers: opts.existing_load_balancers,
        ready_nodes: opts.ready_nodes,
        latency_ms: opts.latency_ms,
        cloud_rate_limit: opts.cloud_rate_limit,
        cloud_rate_window_secs: opts.cloud_rate_window_secs,
        workers: opts.workers,
        kube_api: opts.kube_api.clone(),
        rust_config: opts.rust_config.clone(),
        rust_flags: opts.rust_flag.clone(),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        results,
    };
    print!("{}", table(&report));
    if let Some(dir) = opts.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&opts.out, serde_json::to_string_pretty(&report)?)?;
    progress(format_args!("wrote {}", opts.out.display()));
    Ok(())
}

/// The workspace root: `CARGO_MANIFEST_DIR/../..`.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_binary(opts: &Options) -> Result<PathBuf> {
    if let Some(path) = &opts.rust_ccm {
        return Ok(path.clone());
    }
    progress("building do-like-cloud-controller-manager (release)");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "build",
            "--release",
            "-p",
            "ccm-do-like-cloud",
            "--bin",
            "do-like-cloud-controller-manager",
        ])
        .stdin(Stdio::null())
        .status()?;
    if !status.success() {
        return Err("cargo build of do-like-cloud-controller-manager failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    Ok(target.join("release/do-like-cloud-controller-manager"))
}
