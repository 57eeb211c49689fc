//! The results (the JSON written to `--out`) and the table: each measure's median and range
//! over the runs of each CCM, and the ratio of ours to DigitalOcean's medians.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// One run of one CCM.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub(crate) struct RunResult {
    /// `rust` or `digitalocean`.
    pub(crate) name: String,
    /// Which of the `--repeat` runs.
    pub(crate) repeat: usize,
    /// Seconds from the first create until the first Service had an ingress.
    pub(crate) seconds_to_first: f64,
    /// Seconds from the first create until every Service had one.
    pub(crate) seconds_to_all: f64,
    /// Seconds the driver took to create the Services.
    pub(crate) create_seconds: f64,
    /// Cloud requests by route during the scenario (the simulator's counters; `429` and
    /// `500` count refused requests).
    pub(crate) requests: BTreeMap<String, u64>,
    /// The CCM's API requests during the scenario by verb and resource (the audit log),
    /// watches left out.
    pub(crate) api_requests: BTreeMap<String, u64>,
    /// The Events about the Services, by type and reason, counted with their `count`.
    #[serde(default)]
    pub(crate) events: BTreeMap<String, u64>,
    /// CPU seconds (user + system) the CCM spent in the scenario.
    pub(crate) cpu_seconds: f64,
    /// The CCM's peak RSS over the whole run (`VmHWM`), MiB.
    pub(crate) peak_rss_mib: f64,
    /// `(seconds, Services with an ingress)`, as they were seen.
    pub(crate) curve: Vec<(f64, usize)>,
}

impl RunResult {
    /// Cloud requests per Service, every route.
    pub(crate) fn requests_per_service(&self, services: usize) -> f64 {
        self.requests.values().sum::<u64>() as f64 / services.max(1) as f64
    }

    /// Seconds until at least half of the `services` had an ingress (from the curve).
    pub(crate) fn seconds_to_half(&self, services: usize) -> f64 {
        self.curve
            .iter()
            .find(|(_, n)| n * 2 >= services)
            .map_or(self.seconds_to_all, |(at, _)| *at)
    }

    /// How long a Service waited for its ingress, on average: each step up of the curve is
    /// that many Services served at that time.
    pub(crate) fn mean_wait(&self, services: usize) -> f64 {
        let mut served = 0;
        let mut total = 0.0;
        for &(at, n) in &self.curve {
            if n > served {
                total += (n - served) as f64 * at;
                served = n;
            }
        }
        total / services.max(1) as f64
    }
}

/// Everything a run of the driver measured, with its settings.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub(crate) struct Report {
    pub(crate) services: usize,
    pub(crate) nodes: usize,
    pub(crate) activation_ms: u64,
    #[serde(default)]
    pub(crate) existing_load_balancers: usize,
    #[serde(default)]
    pub(crate) ready_nodes: bool,
    pub(crate) latency_ms: u64,
    pub(crate) cloud_rate_limit: u32,
    pub(crate) cloud_rate_window_secs: u64,
    pub(crate) workers: u32,
    pub(crate) kube_api: Option<Vec<u32>>,
    pub(crate) rust_config: Vec<String>,
    #[serde(default)]
    pub(crate) rust_flags: Vec<String>,
    pub(crate) cpus: usize,
    pub(crate) results: Vec<RunResult>,
}

/// The median and range of `values` (not empty).
fn summary(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[0], v[n - 1])
}

/// A row of the table: its label, and how to read its value off a run.
type Row = (String, Box<dyn Fn(&RunResult) -> f64>);

/// The table: a row per measure, a column per CCM, then ours / DigitalOcean's.
pub(crate) fn table(report: &Report) -> String {
    let names: Vec<String> = {
        let mut seen = Vec::new();
        for r in &report.results {
            if !seen.contains(&r.name) {
                seen.push(r.name.clone());
            }
        }
        seen
    };
    let of = |name: &str| -> Vec<&RunResult> {
        report.results.iter().filter(|r| r.name == name).collect()
    };
    let services = report.services;
    let mut rows: Vec<Row> = vec![
        (
            "seconds until every ingress".into(),
            Box::new(|r| r.seconds_to_all),
        ),
        (
            "seconds until the first ingress".into(),
            Box::new(|r| r.seconds_to_first),
        ),
        (
            "seconds until half the ingresses".into(),
            Box::new(move |r| r.seconds_to_half(services)),
        ),
        (
            "mean seconds a Service waits".into(),
            Box::new(move |r| r.mean_wait(services)),
        ),
        (
            "cloud requests per Service".into(),
            Box::new(move |r| r.requests_per_service(services)),
        ),
    ];
    let routes: BTreeSet<String> = report
        .results
        .iter()
        .flat_map(|r| r.requests.keys().cloned())
        .collect();
    for route in routes {
        let key = route.clone();
        rows.push((
            format!("  {route}"),
            Box::new(move |r| {
                r.requests.get(&key).copied().unwrap_or(0) as f64 / services.max(1) as f64
            }),
        ));
    }
    rows.push((
        "API requests per Service".into(),
        Box::new(move |r| r.api_requests.values().sum::<u64>() as f64 / services.max(1) as f64),
    ));
    let kinds: BTreeSet<String> = report
        .results
        .iter()
        .flat_map(|r| r.api_requests.keys().cloned())
        .collect();
    for kind in kinds {
        rows.push((
            format!("  {kind}"),
            Box::new(move |r| {
                r.api_requests.get(&kind).copied().unwrap_or(0) as f64 / services.max(1) as f64
            }),
        ));
    }
    rows.push((
        "Service Events per Service".into(),
        Box::new(move |r| r.events.values().sum::<u64>() as f64 / services.max(1) as f64),
    ));
    let reasons: BTreeSet<String> = report
        .results
        .iter()
        .flat_map(|r| r.events.keys().cloned())
        .collect();
    for reason in reasons {
        rows.push((
            format!("  {reason}"),
            Box::new(move |r| {
                r.events.get(&reason).copied().unwrap_or(0) as f64 / services.max(1) as f64
            }),
        ));
    }
    rows.push(("CPU seconds".into(), Box::new(|r| r.cpu_seconds)));
    rows.push(("peak RSS (MiB)".into(), Box::new(|r| r.peak_rss_mib)));

    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} LoadBalancer Services at once, {} {}Nodes, {} other load balancers, activation {} ms, {} ms a request, \
         cloud limit {} per {} s, {} service worker(s), kube API {}, {} CPUs{}",
        report.services,
        report.nodes,
        if report.ready_nodes { "Ready " } else { "" },
        report.existing_load_balancers,
        report.activation_ms,
        report.latency_ms,
        report.cloud_rate_limit,
        report.cloud_rate_window_secs,
        report.workers,
        report.kube_api.as_ref().map_or_else(
            || "QPS 20 burst 30".to_owned(),
            |q| format!("QPS {} burst {}", q[0], q.get(1).copied().unwrap_or(q[0]))
        ),
        report.cpus,
        {
            let ours: Vec<&str> = report
                .rust_config
                .iter()
                .chain(&report.rust_flags)
                .map(String::as_str)
                .collect();
            if ours.is_empty() {
                String::new()
            } else {
                format!("; ours with {}", ours.join(", "))
            }
        }
    );
    let ratio = names.iter().any(|n| n == "rust") && names.iter().any(|n| n == "digitalocean");
    let _ = write!(out, "{:<44}", "");
    for name in &names {
        let _ = write!(out, "{name:>24}");
    }
    if ratio {
        let _ = write!(out, "{:>20}", "rust/digitalocean");
    }
    out.push('\n');
    for (label, value) in &rows {
        let _ = write!(out, "{label:<44}");
        let mut medians = BTreeMap::new();
        for name in &names {
            let values: Vec<f64> = of(name).into_iter().map(value).collect();
            let (median, low, high) = summary(&values);
            medians.insert(name.as_str(), median);
            let cell = if values.len() > 1 {
                format!("{median:.2} ({low:.2}–{high:.2})")
            } else {
                format!("{median:.2}")
            };
            let _ = write!(out, "{cell:>24}");
        }
        if ratio {
            let (ours, theirs) = (medians["rust"], medians["digitalocean"]);
            let cell = if theirs > 0.0 {
                format!("{:.2}", ours / theirs)
            } else {
                "-".to_owned()
            };
            let _ = write!(out, "{cell:>20}");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, all: f64, gets: u64) -> RunResult {
        RunResult {
            name: name.into(),
            seconds_to_all: all,
            seconds_to_first: all / 2.0,
            requests: BTreeMap::from([("GET /v2/load_balancers/{id}".into(), gets)]),
            ..RunResult::default()
        }
    }

    #[test]
    fn half_and_mean_wait_read_the_curve() {
        let r = RunResult {
            seconds_to_all: 4.0,
            curve: vec![(0.0, 0), (1.0, 1), (2.0, 3), (2.5, 2), (4.0, 4)],
            ..RunResult::default()
        };
        assert_eq!(r.seconds_to_half(4), 2.0);
        assert_eq!(r.seconds_to_half(7), 4.0, "never half: every ingress");
        // 1 at 1 s, 2 at 2 s, the dip ignored, 1 at 4 s.
        assert_eq!(r.mean_wait(4), (1.0 + 4.0 + 4.0) / 4.0);
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(summary(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(summary(&[4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }

    #[test]
    fn the_table_shows_medians_per_route_and_the_ratio() {
        let report = Report {
            services: 10,
            results: vec![
                run("rust", 4.0, 10),
                run("digitalocean", 10.0, 30),
                run("rust", 6.0, 20),
                run("digitalocean", 12.0, 30),
            ],
            ..Report::default()
        };
        let table = table(&report);
        let every = table
            .lines()
            .find(|l| l.starts_with("seconds until every ingress"))
            .unwrap();
        assert!(every.contains("5.00 (4.00–6.00)"), "{table}");
        assert!(every.contains("11.00 (10.00–12.00)"), "{table}");
        assert!(every.trim_end().ends_with("0.45"), "{table}");
        let gets = table
            .lines()
            .find(|l| l.contains("GET /v2/load_balancers/{id}"))
            .unwrap();
        assert!(gets.contains("1.50 (1.00–2.00)"), "{table}");
        assert!(gets.trim_end().ends_with("0.50"), "{table}");
    }
}
