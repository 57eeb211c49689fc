//! `do-like-api-simulator`: serves the DigitalOcean-like API on a loopback address.
//!
//! ```sh
//! DO_LIKE_TOKEN=secret do-like-api-simulator --listen 127.0.0.1:0 --state-file sim.json \
//!     --lb-activation-ms 1000 --rate-limit 5000 --droplets 3
//! ```
//!
//! Prints `listening on http://<addr>` once bound. The token comes from `--token-file` or
//! the `DO_LIKE_TOKEN` environment variable; `--admin-token-file` makes `/admin` require a
//! token of its own. `--droplets N` creates `node-1` .. `node-N` when the state is empty.
//! `--routes-extension off` answers `/v2/x-routes` with 404, as DigitalOcean's API does.
//! `--non-loopback on` lets `--listen` name another address than loopback (a test network
//! namespace's), and then needs `--admin-token-file`.
//! `--lb-addresses CIDR` turns on the data plane: load balancers get addresses of that range
//! (loopback, e.g. `127.77.0.0/24`, unless `--non-loopback on`) and forward traffic to their
//! droplets.
//! `--lb-addresses-v6 CIDR` gives dual-stack load balancers (`network_stack: DUALSTACK`) an
//! IPv6 address of that range too, forwarding like the IPv4 one: `::1/128` (one load
//! balancer, on loopback) or a unique-local range (`fd00::/8`, e.g. `fd00:77::/112`, with
//! `--non-loopback on`, routed locally and bindable: `ip -6 route add local <range> dev lo`
//! and `sysctl -w net.ipv6.ip_nonlocal_bind=1` in the simulator's namespace); it needs
//! `--lb-addresses`.
//! `--kernel-routes on` makes the `/v2/x-routes` routes routes of the simulator's network
//! namespace, to their droplets' private addresses (root in a test network namespace).
//! Stops on Ctrl-C or SIGTERM.
#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use ccm_do_like_simulator::{RunningSimulator, SimulatorConfig};

fn usage() -> ExitCode {
    eprintln!(
        "usage: do-like-api-simulator [--version] [--listen 127.0.0.1:PORT] [--token-file FILE] \
         [--admin-token-file FILE] [--state-file FILE] [--lb-activation-ms MS] \
         [--rate-limit N] [--droplets N] [--routes-extension on|off] [--non-loopback on|off] \
         [--lb-addresses CIDR] [--lb-addresses-v6 CIDR] [--kernel-routes on|off]\n\
         The token is read from --token-file or $DO_LIKE_TOKEN; /admin needs the token in \
         --admin-token-file when it is given."
    );
    ExitCode::from(2)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut config = SimulatorConfig::new(String::new());
    let mut token_file = None;
    let mut admin_token_file = None;
    let mut droplets = 0u32;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
            None => (arg.clone(), None),
        };
        if flag == "--help" || flag == "-h" {
            return usage();
        }
        if flag == "--version" || flag == "-V" {
            println!("do-like-api-simulator v{}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        let Some(value) = inline.or_else(|| args.next()) else {
            eprintln!("error: {flag} needs a value");
            return usage();
        };
        let parsed: Result<(), String> = match flag.as_str() {
            "--listen" => value
                .parse()
                .map(|v| config.listen = v)
                .map_err(|e: std::net::AddrParseError| e.to_string()),
            "--token-file" => {
                token_file = Some(value.clone());
                Ok(())
            }
            "--admin-token-file" => {
                admin_token_file = Some(value.clone());
                Ok(())
            }
            "--state-file" => {
                config.state_file = Some(value.clone().into());
                Ok(())
            }
            "--lb-activation-ms" => number(&value).map(|v| {
                config.lb_activation_delay = Duration::from_millis(v);
            }),
            "--rate-limit" => number(&value).map(|v| config.rate_limit = v),
            "--non-loopback" => on_off(&value).map(|v| config.allow_non_loopback = v),
            "--routes-extension" => on_off(&value).map(|v| config.routes_extension = v),
            "--kernel-routes" => on_off(&value).map(|v| config.kernel_routes = v),
            "--droplets" => number(&value).map(|v| droplets = v),
            "--lb-addresses" => value
                .parse()
                .map(|v| config.load_balancer_addresses = Some(v)),
            "--lb-addresses-v6" => value
                .parse()
                .map(|v| config.load_balancer_addresses_v6 = Some(v)),
            _ => {
                eprintln!("error: unknown flag {flag}");
                return usage();
            }
        };
        if let Err(e) = parsed {
            eprintln!("error: invalid value {value:?} for {flag}: {e}");
            return usage();
        }
    }
    config.token = match token_file {
        Some(path) => match read_token("--token-file", &path) {
            Ok(t) => t,
            Err(code) => return code,
        },
        None => std::env::var("DO_LIKE_TOKEN").unwrap_or_default(),
    };
    if let Some(path) = admin_token_file {
        match read_token("--admin-token-file", &path) {
            Ok(t) if !t.is_empty() => config.admin_token = Some(t),
            Ok(_) => {
                eprintln!("error: --admin-token-file {path} is empty");
                return ExitCode::FAILURE;
            }
            Err(code) => return code,
        }
    }
    if config.token.is_empty() {
        eprintln!("error: no token: set --token-file or DO_LIKE_TOKEN");
        return ExitCode::FAILURE;
    }
    let sim = match RunningSimulator::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if sim.handle().droplets().is_empty() {
        for i in 1..=droplets {
            sim.handle()
                .create_droplet(&format!("node-{i}"), "s-2vcpu-4gb", "nyc1");
        }
    }
    // SIGTERM is caught from before the address is printed: whoever reads it may stop the
    // simulator at once.
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    #[cfg(not(unix))]
    let term = None::<()>;
    println!("listening on {}", sim.url());
    let _ = std::io::stdout().flush();
    wait_for_signal(term).await;
    sim.shutdown().await;
    ExitCode::SUCCESS
}

/// `on` or `off`.
fn on_off(value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("must be on or off".to_owned()),
    }
}

fn number<T: std::str::FromStr<Err = std::num::ParseIntError>>(value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|e: std::num::ParseIntError| e.to_string())
}

/// A token file's content, trimmed: a regular file of at most 64 KiB. Prints the error (with
/// its cause) otherwise.
fn read_token(flag: &str, path: &str) -> Result<String, ExitCode> {
    const MAX: u64 = 64 * 1024;
    let read = || -> std::io::Result<String> {
        let file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        if meta.len() > MAX {
            return Err(std::io::Error::other(format!("larger than {MAX} bytes")));
        }
        let mut token = String::new();
        file.take(MAX).read_to_string(&mut token)?;
        Ok(token.trim().to_owned())
    };
    read().map_err(|e| {
        eprintln!("error: {flag} {path}: {e}");
        ExitCode::FAILURE
    })
}

#[cfg(unix)]
async fn wait_for_signal(term: Option<tokio::signal::unix::Signal>) {
    if let Some(mut term) = term {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        return;
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(not(unix))]
async fn wait_for_signal(_term: Option<()>) {
    let _ = tokio::signal::ctrl_c().await;
}
