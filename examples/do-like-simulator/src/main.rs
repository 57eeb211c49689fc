//! `do-like-api-simulator`: serves the DigitalOcean-like API on a loopback address.
//!
//! ```sh
//! DO_LIKE_TOKEN=secret do-like-api-simulator --listen 127.0.0.1:0 --state-file sim.json \
//!     --lb-activation-ms 1000 --rate-limit 5000 --droplets 3
//! ```
//!
//! Prints `listening on http://<addr>` once bound. The token comes from `--token-file` or
//! the `DO_LIKE_TOKEN` environment variable. `--droplets N` creates `node-1` .. `node-N`
//! when the state is empty. Stops on Ctrl-C or SIGTERM.
#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use ccm_do_like_simulator::{RunningSimulator, SimulatorConfig};

fn usage() -> ExitCode {
    eprintln!(
        "usage: do-like-api-simulator [--listen 127.0.0.1:PORT] [--token-file FILE] \
         [--state-file FILE] [--lb-activation-ms MS] [--rate-limit N] [--droplets N]\n\
         The token is read from --token-file or $DO_LIKE_TOKEN."
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
        let Some(value) = inline.or_else(|| args.next()) else {
            eprintln!("error: {flag} needs a value");
            return usage();
        };
        let ok = match flag.as_str() {
            "--listen" => value.parse().map(|v| config.listen = v).is_ok(),
            "--token-file" => {
                token_file = Some(value);
                true
            }
            "--state-file" => {
                config.state_file = Some(value.into());
                true
            }
            "--lb-activation-ms" => value
                .parse()
                .map(|v| config.lb_activation_delay = Duration::from_millis(v))
                .is_ok(),
            "--rate-limit" => value.parse().map(|v| config.rate_limit = v).is_ok(),
            "--droplets" => value.parse().map(|v| droplets = v).is_ok(),
            _ => {
                eprintln!("error: unknown flag {flag}");
                return usage();
            }
        };
        if !ok {
            eprintln!("error: invalid value for {flag}");
            return usage();
        }
    }
    config.token = match token_file {
        Some(path) => match std::fs::read_to_string(&path) {
            Ok(t) => t.trim().to_owned(),
            Err(e) => {
                eprintln!("error: --token-file {path}: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => std::env::var("DO_LIKE_TOKEN").unwrap_or_default(),
    };
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
    println!("listening on {}", sim.url());
    let _ = std::io::stdout().flush();
    wait_for_signal().await;
    sim.shutdown().await;
    ExitCode::SUCCESS
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
