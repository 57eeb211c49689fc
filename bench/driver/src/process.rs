//! One CCM as a child process: its flags, what `/proc` says about it (CPU, memory), and
//! what its `/metrics` says (API requests, cloud calls, the fake cloud's state).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccm_test::net::free_port;
use ccm_test::process::CcmProcess;

use crate::{Options, Result};

/// The lines of a CCM's log quoted in an error.
const LOG_TAIL: usize = 30;

/// A running CCM; killed on drop.
pub(crate) struct Process {
    /// `rust` or `go`.
    pub(crate) name: String,
    process: CcmProcess,
    /// Where its `/metrics` is served.
    pub(crate) endpoint: Endpoint,
}

impl Process {
    /// Starts `binary` (`name` is `rust` or `go`) with `kubeconfig` (the CCM's own user,
    /// so the audit log can tell its requests), with the flags both get.
    pub(crate) fn start(
        opts: &Options,
        name: &str,
        binary: &Path,
        kubeconfig: &Path,
        dir: &Path,
    ) -> Result<Self> {
        let config = dir.join("fake.yaml");
        std::fs::write(
            &config,
            format!("nodesAreInstances: true\nlatencyMs: {}\n", opts.latency_ms),
        )?;
        let port = free_port();
        let mut args = vec![
            "--cloud-provider=fake".to_owned(),
            format!("--cloud-config={}", config.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
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
        if let Some(content_type) = &opts.content_type {
            args.push(format!("--kube-api-content-type={content_type}"));
        }
        let https = name == "go";
        if https {
            // Go serves HTTPS with delegated authn/authz; without the authn/authz
            // kubeconfigs it serves anonymous requests to the always-allowed paths only.
            args.extend([
                format!("--cert-dir={}", dir.join("certs").display()),
                "--authentication-skip-lookup=true".to_owned(),
                // `/debug/pprof/*` too, so the reference can be profiled during a run
                // (`go tool pprof https+insecure://127.0.0.1:<port>/debug/pprof/profile`).
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof/*"
                    .to_owned(),
            ]);
        } else {
            args.push("--insecure-serving".to_owned());
        }
        let builder = CcmProcess::builder(binary)
            .args(&args)
            .log_file(dir.join(format!("{name}-ccm.log")));
        // Ours logs as its flags say (`-v`) unless the user set `RUST_LOG`.
        let builder = match std::env::var_os("RUST_LOG") {
            Some(filter) => builder.env("RUST_LOG", filter),
            None => builder.env_remove("RUST_LOG"),
        };
        Ok(Self {
            name: name.to_owned(),
            process: builder.try_spawn()?,
            endpoint: Endpoint { port, https },
        })
    }

    /// The process ID.
    pub(crate) fn pid(&self) -> u32 {
        self.process.id()
    }

    /// The last lines of its log.
    pub(crate) fn log_tail(&self) -> String {
        self.process.log_tail(LOG_TAIL)
    }

    /// Reads `/metrics` once.
    pub(crate) fn scrape(&self) -> Result<Scrape> {
        self.endpoint.scrape()
    }

    /// CPU seconds (user + system) so far.
    pub(crate) fn cpu_seconds(&self) -> Result<f64> {
        cpu_seconds(self.pid())
    }

    /// Peak resident memory so far (VmHWM), in MiB.
    pub(crate) fn peak_rss_mib(&self) -> Result<f64> {
        proc_status_mib(self.pid(), "VmHWM")
    }

    /// An error with the log's tail if the process has exited.
    pub(crate) fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.process.try_wait() {
            return Err(format!("the CCM exited ({status}); log:\n{}", self.log_tail()).into());
        }
        Ok(())
    }
}

/// A CCM's `/metrics` endpoint.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Endpoint {
    port: u16,
    https: bool,
}

impl Endpoint {
    /// Reads `/metrics` once (with `curl -k`: Go's endpoint is HTTPS, self-signed).
    pub(crate) fn scrape(&self) -> Result<Scrape> {
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
        Ok(Scrape(String::from_utf8_lossy(&out.stdout).into_owned()))
    }
}

/// One `/metrics` answer (Prometheus text).
pub(crate) struct Scrape(String);

/// The metric both CCMs count API requests in (series summed: the label sets differ).
pub(crate) const API_REQUESTS: &str = "rest_client_requests_total";
/// Cloud calls by `provider`, `method`, `result`: ccm-core's, mirrored by the Go cloud.
pub(crate) const CLOUD_CALLS: &str = "ccm_cloud_requests_total";
/// Route creates the fake cloud refused as duplicates (both fake clouds).
pub(crate) const DUPLICATE_ROUTE_CREATES: &str = "fake_cloud_duplicate_route_creates_total";
/// Load balancer updates that gave a load balancer the host set (Node name → provider ID)
/// it had (both fake clouds).
pub(crate) const REDUNDANT_LB_UPDATES: &str = "fake_cloud_redundant_load_balancer_updates_total";
/// Load balancers in the fake cloud (both).
pub(crate) const LOAD_BALANCERS: &str = "fake_cloud_load_balancers";
/// The fewest Nodes any load balancer points at (both).
pub(crate) const LOAD_BALANCER_HOSTS_MIN: &str = "fake_cloud_load_balancer_hosts_min";

impl Scrape {
    /// Every series of `name`: labels → value (see [`metric_series`]).
    pub(crate) fn series(&self, name: &str) -> BTreeMap<String, f64> {
        metric_series(&self.0, name)
    }

    /// The sum of every series of `name` (0 when absent).
    pub(crate) fn sum(&self, name: &str) -> f64 {
        self.series(name).values().sum()
    }

    /// Cloud calls by method (results summed).
    pub(crate) fn cloud_calls(&self) -> BTreeMap<String, f64> {
        let mut by_method = BTreeMap::new();
        for (labels, v) in self.series(CLOUD_CALLS) {
            let method = labels
                .split(',')
                .find_map(|l| l.strip_prefix("method="))
                .unwrap_or("?")
                .trim_matches('"')
                .to_owned();
            *by_method.entry(method).or_insert(0.0) += v;
        }
        by_method
    }
}

/// Every sample of `name` in Prometheus text: its labels (`{...}`, or empty) → value.
/// Labels are kept as written, minus `host` (Go's names the apiserver's random port).
pub(crate) fn metric_series(text: &str, name: &str) -> BTreeMap<String, f64> {
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

/// `after - before` per key, zeros dropped.
pub(crate) fn delta(
    after: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

/// Samples a process's resident memory (VmRSS) every `every` on a thread of its own until
/// dropped: the RSS-over-time curve.
pub(crate) struct RssSampler {
    samples: Arc<Mutex<Vec<(f64, f64)>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    /// Starts sampling `pid`; times are seconds since `start`.
    pub(crate) fn start(pid: u32, start: Instant, every: Duration) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (samples, stop) = (samples.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(mib) = proc_status_mib(pid, "VmRSS") else {
                        break;
                    };
                    samples
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((start.elapsed().as_secs_f64(), mib));
                    std::thread::sleep(every);
                }
            })
        };
        Self {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// The samples so far: `(seconds, MiB)`.
    pub(crate) fn samples(&self) -> Vec<(f64, f64)> {
        self.samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Stops sampling and returns every sample.
    pub(crate) fn finish(mut self) -> Vec<(f64, f64)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.samples()
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// CPU seconds (user + system) of `pid` so far.
pub(crate) fn cpu_seconds(pid: u32) -> Result<f64> {
    Ok(ccm_test::process::cpu_seconds(pid)?)
}

/// A `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in MiB.
fn proc_status_mib(pid: u32, key: &str) -> Result<f64> {
    Ok(ccm_test::process::status_mib(pid, key)?)
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

    #[test]
    fn cloud_calls_by_method_sum_the_results() {
        let scrape = Scrape(
            "ccm_cloud_requests_total{provider=\"fake\",method=\"create_route\",result=\"success\"} 5\n\
             ccm_cloud_requests_total{provider=\"fake\",method=\"create_route\",result=\"error\"} 2\n\
             ccm_cloud_requests_total{method=\"list_routes\",provider=\"fake\",result=\"success\"} 1\n\
             fake_cloud_load_balancers 3\n"
                .to_owned(),
        );
        let calls = scrape.cloud_calls();
        assert_eq!(calls["create_route"], 7.0);
        assert_eq!(calls["list_routes"], 1.0);
        assert_eq!(scrape.sum(LOAD_BALANCERS), 3.0);
        assert_eq!(scrape.sum(DUPLICATE_ROUTE_CREATES), 0.0);
    }

    #[test]
    fn deltas_drop_zeros() {
        let before = BTreeMap::from([("a".to_owned(), 1.0), ("b".to_owned(), 2.0)]);
        let after = BTreeMap::from([
            ("a".to_owned(), 1.0),
            ("b".to_owned(), 5.0),
            ("c".to_owned(), 1.0),
        ]);
        let d = delta(&after, &before);
        assert_eq!(
            d,
            BTreeMap::from([("b".to_owned(), 3.0), ("c".to_owned(), 1.0)])
        );
    }
}
