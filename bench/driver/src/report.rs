//! The results: what is measured (the JSON written to `--out`), the table printed with the
//! ratio Rust/Go, and the picture (hand-written SVG, no plotting dependency).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What one CCM did in one scenario.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub(crate) struct ScenarioResult {
    /// Objects the scenario waited for.
    pub(crate) objects: usize,
    /// Seconds from the first create to the last object being done.
    pub(crate) seconds: f64,
    /// Seconds the driver took to create the objects (16 requests at a time, no client
    /// rate limit): a yardstick of what the apiserver takes on this machine.
    pub(crate) create_seconds: f64,
    /// API requests the CCM made during the scenario (all verbs and resources).
    pub(crate) api_requests: f64,
    /// `api_requests / objects`.
    pub(crate) api_requests_per_object: f64,
    /// CPU seconds (user + system) the CCM spent during the scenario.
    pub(crate) cpu_seconds: f64,
    /// `api_requests` by series of `rest_client_requests_total` (labels minus `host`).
    pub(crate) api_requests_by_series: BTreeMap<String, f64>,
    /// Cloud calls the CCM made during the scenario, by method (`ccm_cloud_requests_total`).
    pub(crate) cloud_calls: BTreeMap<String, f64>,
    /// Route creates the fake cloud refused because the route existed.
    pub(crate) duplicate_route_creates: f64,
    /// `(seconds since start, objects done)`, sampled as progress was seen.
    pub(crate) progress: Vec<(f64, usize)>,
}

impl ScenarioResult {
    /// Every cloud call, per object.
    pub(crate) fn cloud_calls_per_object(&self) -> f64 {
        self.cloud_calls.values().sum::<f64>() / self.objects.max(1) as f64
    }
}

/// Scenario 4: a stretch with no change at all.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub(crate) struct IdleResult {
    /// Nodes and Services in the cluster while idle.
    pub(crate) nodes: usize,
    /// LoadBalancer Services in the cluster while idle.
    pub(crate) services: usize,
    /// Seconds measured.
    pub(crate) seconds: f64,
    /// CPU seconds spent in them.
    pub(crate) cpu_seconds: f64,
    /// API requests per minute.
    pub(crate) api_requests_per_minute: f64,
    /// Cloud calls per minute, by method.
    pub(crate) cloud_calls_per_minute: BTreeMap<String, f64>,
    /// The highest resident memory sampled while idle (MiB).
    pub(crate) max_rss_mib: f64,
}

/// What one CCM did in the whole run.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub(crate) struct CcmResult {
    /// `rust` or `go`.
    pub(crate) name: String,
    /// The binary that ran.
    pub(crate) binary: String,
    /// Scenario name → result.
    pub(crate) scenarios: BTreeMap<String, ScenarioResult>,
    /// Scenario 4, when `--idle-secs` > 0.
    pub(crate) idle: Option<IdleResult>,
    /// Peak resident memory of the process over the run (VmHWM), in MiB.
    pub(crate) peak_rss_mib: f64,
    /// CPU seconds over the whole run, start-up included.
    pub(crate) total_cpu_seconds: f64,
    /// Resident memory over the run: `(seconds since the CCM started, MiB)`.
    pub(crate) rss: Vec<(f64, f64)>,
    /// Duplicate route creates over the whole run.
    pub(crate) duplicate_route_creates: f64,
}

/// The JSON written to `--out`.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct Report {
    /// The settings both CCMs ran with.
    pub(crate) settings: Settings,
    /// Where.
    pub(crate) machine: Machine,
    /// One per CCM, in the order run.
    pub(crate) results: Vec<CcmResult>,
}

/// The settings both CCMs ran with.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct Settings {
    pub(crate) nodes: usize,
    pub(crate) services: usize,
    #[serde(default)]
    pub(crate) new_nodes: usize,
    #[serde(default)]
    pub(crate) routes: usize,
    #[serde(default)]
    pub(crate) idle_secs: u64,
    pub(crate) qps: f64,
    pub(crate) burst: u32,
    pub(crate) workers: u32,
    pub(crate) latency_ms: u64,
}

/// The machine.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct Machine {
    pub(crate) cpus: usize,
    pub(crate) kernel: String,
}

/// The comparison table, one row per measure, with Rust/Go when both ran.
pub(crate) fn table(report: &Report) -> String {
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
        let mut row = |label: &str, f: fn(&ScenarioResult) -> f64| {
            rows.push((format!("{s}: {label}"), field(rust, f), field(go, f)));
        };
        row("seconds", |x| x.seconds);
        row("creating them took (s)", |x| x.create_seconds);
        row("API requests per object", |x| x.api_requests_per_object);
        row(
            "cloud calls per object",
            ScenarioResult::cloud_calls_per_object,
        );
        row("CPU seconds", |x| x.cpu_seconds);
    }
    if rust.is_some_and(|r| r.idle.is_some()) || go.is_some_and(|r| r.idle.is_some()) {
        let idle = |r: Option<&CcmResult>, f: fn(&IdleResult) -> f64| {
            r.and_then(|r| r.idle.as_ref()).map(f)
        };
        let mut row = |label: &str, f: fn(&IdleResult) -> f64| {
            rows.push((format!("idle: {label}"), idle(rust, f), idle(go, f)));
        };
        row("CPU seconds per minute", |x| {
            x.cpu_seconds * 60.0 / x.seconds.max(0.001)
        });
        row("API requests per minute", |x| x.api_requests_per_minute);
        row("cloud calls per minute", |x| {
            x.cloud_calls_per_minute.values().sum()
        });
        row("max RSS (MiB)", |x| x.max_rss_mib);
    }
    rows.push((
        "duplicate route creates".into(),
        rust.map(|r| r.duplicate_route_creates),
        go.map(|r| r.duplicate_route_creates),
    ));
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
        "\n{:<46} {:>10} {:>10} {:>9}\n",
        "measure", "rust", "go", "rust/go"
    );
    for (label, r, g) in rows {
        let ratio = match (r, g) {
            (Some(r), Some(g)) if g > 0.0 => format!("{:.2}", r / g),
            _ => "-".to_owned(),
        };
        out += &format!("{label:<46} {:>10} {:>10} {ratio:>9}\n", cell(r), cell(g));
    }
    out
}

const W: f64 = 640.0;
const H: f64 = 260.0;
const M: f64 = 50.0;

fn colour(ccm: &str) -> &'static str {
    if ccm == "rust" { "#d9531e" } else { "#1f77b4" }
}

/// One line of a panel: the CCM, its points, its legend.
type Line<'a> = (&'a str, Vec<(f64, f64)>, String);

/// One panel: axes, a title, and one polyline per CCM with its legend.
struct Panel<'a> {
    top: f64,
    title: String,
    x_max: f64,
    x_unit: &'a str,
    y_max: f64,
    y_label: String,
    lines: Vec<Line<'a>>,
}

impl Panel<'_> {
    fn draw(&self, out: &mut String) {
        let (x0, x1, y0, y1) = (M, W - 20.0, self.top + H - 40.0, self.top + 30.0);
        let (x_max, y_max) = (self.x_max.max(0.001), self.y_max.max(0.001));
        *out += &format!(
            "<text x=\"{M}\" y=\"{}\" font-size=\"14\">{}</text>\n\
             <polyline fill=\"none\" stroke=\"black\" points=\"{x0},{y1} {x0},{y0} {x1},{y0}\"/>\n\
             <text x=\"{x0}\" y=\"{}\">0</text><text x=\"{x1}\" y=\"{}\" text-anchor=\"end\">{x_max:.1} {}</text>\n\
             <text x=\"{}\" y=\"{y0}\" text-anchor=\"end\">0</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
            self.top + 18.0,
            self.title,
            y0 + 15.0,
            y0 + 15.0,
            self.x_unit,
            x0 - 4.0,
            x0 - 4.0,
            y1 + 4.0,
            self.y_label,
        );
        for (j, (ccm, points, legend)) in self.lines.iter().enumerate() {
            let c = colour(ccm);
            let points: Vec<String> = points
                .iter()
                .map(|(x, y)| {
                    let px = x0 + (x1 - x0) * x / x_max;
                    let py = y0 - (y0 - y1) * y / y_max;
                    format!("{px:.1},{py:.1}")
                })
                .collect();
            *out += &format!(
                "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\n\
                 <text x=\"{}\" y=\"{}\" fill=\"{c}\">{ccm}: {legend}</text>\n",
                points.join(" "),
                x0 + 10.0,
                y1 + 15.0 * (j as f64 + 1.0),
            );
        }
    }
}

/// Line charts: per scenario, the objects done over time, one line per CCM (Rust orange,
/// Go blue); then resident memory over the whole run.
pub(crate) fn svg(report: &Report) -> String {
    let mut scenarios: Vec<&String> = report
        .results
        .iter()
        .flat_map(|r| r.scenarios.keys())
        .collect();
    scenarios.sort();
    scenarios.dedup();
    let mut panels = Vec::new();
    let s = &report.settings;
    for (i, name) in scenarios.iter().enumerate() {
        let runs: Vec<(&str, &ScenarioResult)> = report
            .results
            .iter()
            .filter_map(|r| r.scenarios.get(*name).map(|s| (r.name.as_str(), s)))
            .collect();
        let objects = runs.first().map_or(0, |(_, s)| s.objects);
        panels.push(Panel {
            top: H * i as f64,
            title: format!(
                "{name}: {objects} objects done over time ({} nodes, QPS {}, {} worker(s), \
                 latency {} ms)",
                s.nodes, s.qps, s.workers, s.latency_ms
            ),
            x_max: runs.iter().map(|(_, s)| s.seconds).fold(0.0, f64::max),
            x_unit: "s",
            y_max: objects as f64,
            y_label: objects.to_string(),
            lines: runs
                .iter()
                .map(|(ccm, s)| {
                    (
                        *ccm,
                        s.progress.iter().map(|(t, n)| (*t, *n as f64)).collect(),
                        format!("{:.2} s", s.seconds),
                    )
                })
                .collect(),
        });
    }
    if report.results.iter().any(|r| !r.rss.is_empty()) {
        let y_max = report
            .results
            .iter()
            .flat_map(|r| r.rss.iter().map(|(_, m)| *m))
            .fold(0.0, f64::max)
            * 1.1;
        panels.push(Panel {
            top: H * panels.len() as f64,
            title: "resident memory (VmRSS, MiB) over the whole run".into(),
            x_max: report
                .results
                .iter()
                .flat_map(|r| r.rss.last().map(|(t, _)| *t))
                .fold(0.0, f64::max),
            x_unit: "s",
            y_max,
            y_label: format!("{y_max:.0} MiB"),
            lines: report
                .results
                .iter()
                .map(|r| {
                    (
                        r.name.as_str(),
                        r.rss.clone(),
                        format!("peak {:.1} MiB", r.peak_rss_mib),
                    )
                })
                .collect(),
        });
    }
    let height = H * panels.len().max(1) as f64;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for p in &panels {
        p.draw(&mut out);
    }
    out += "</svg>\n";
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let run = |name: &str, seconds: f64, rss: f64| CcmResult {
            name: name.into(),
            scenarios: BTreeMap::from([(
                "node_init".to_owned(),
                ScenarioResult {
                    objects: 10,
                    seconds,
                    api_requests_per_object: 3.0,
                    cloud_calls: BTreeMap::from([("instance_metadata".to_owned(), 10.0)]),
                    progress: vec![(0.0, 0), (seconds, 10)],
                    ..ScenarioResult::default()
                },
            )]),
            peak_rss_mib: rss,
            rss: vec![(0.0, rss / 2.0), (seconds, rss)],
            ..CcmResult::default()
        };
        Report {
            settings: Settings {
                nodes: 10,
                services: 0,
                new_nodes: 0,
                routes: 0,
                idle_secs: 0,
                qps: 20.0,
                burst: 30,
                workers: 1,
                latency_ms: 5,
            },
            machine: Machine {
                cpus: 2,
                kernel: "test".into(),
            },
            results: vec![run("rust", 2.0, 10.0), run("go", 4.0, 40.0)],
        }
    }

    #[test]
    fn the_table_divides_rust_by_go() {
        let t = table(&report());
        let line = |label: &str| {
            t.lines()
                .find(|l| l.starts_with(label))
                .unwrap_or_else(|| panic!("no {label} row in\n{t}"))
                .split_whitespace()
                .last()
                .unwrap()
                .to_owned()
        };
        assert_eq!(line("node_init: seconds"), "0.50");
        assert_eq!(line("peak RSS (MiB)"), "0.25");
        assert_eq!(line("node_init: cloud calls per object"), "1.00");
        assert!(!t.contains("idle:"), "{t}");
    }

    #[test]
    fn the_picture_has_a_panel_per_scenario_and_one_for_memory() {
        let s = svg(&report());
        assert_eq!(
            s.matches("<polyline fill=\"none\" stroke=\"black\"")
                .count(),
            2
        );
        assert!(s.contains("resident memory"), "{s}");
        assert!(s.contains("rust: peak 10.0 MiB") && s.contains("go: peak 40.0 MiB"));
    }
}
