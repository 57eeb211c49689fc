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
    /// CPU seconds kube-apiserver and etcd spent during the scenario (the driver's creates
    /// included: the same for both CCMs); `None` in results written before it was measured.
    pub(crate) server_cpu_seconds: Option<f64>,
    /// The CCM's requests by kind as the API server saw them (audit log), during the
    /// scenario.
    pub(crate) requests: BTreeMap<String, crate::audit::RequestStats>,
    /// `api_requests` by series of `rest_client_requests_total` (labels minus `host`).
    pub(crate) api_requests_by_series: BTreeMap<String, f64>,
    /// Cloud calls the CCM made during the scenario, by method (`ccm_cloud_requests_total`).
    pub(crate) cloud_calls: BTreeMap<String, f64>,
    /// Route creates the fake cloud refused because the route existed.
    pub(crate) duplicate_route_creates: f64,
    /// Load balancer updates that gave a load balancer the host set it had
    /// (`fake_cloud_redundant_load_balancer_updates_total`).
    pub(crate) redundant_load_balancer_updates: f64,
    /// Node conditions the CCM wrote (audit log: its successful PATCH/UPDATE of
    /// `nodes/status`, each condition in it once).
    pub(crate) condition_writes: f64,
    /// Of those, writes whose `(status, reason)` equalled the Node's previous write of that
    /// condition type.
    pub(crate) duplicate_condition_writes: f64,
    /// The scenario ended at `--timeout-secs` before every object was done; the counts are
    /// those until then.
    pub(crate) timed_out: bool,
    /// Objects done when the scenario ended: `objects`, or fewer when it timed out (0 in
    /// results written before this was recorded).
    pub(crate) done: usize,
    /// `(seconds since start, objects done)`, sampled as progress was seen.
    pub(crate) progress: Vec<(f64, usize)>,
}

impl ScenarioResult {
    /// Objects done: all of them, or those done before the timeout.
    pub(crate) fn objects_done(&self) -> usize {
        if self.timed_out {
            self.done
        } else {
            self.objects
        }
    }

    /// Every cloud call, per object done.
    pub(crate) fn cloud_calls_per_object(&self) -> f64 {
        self.cloud_calls.values().sum::<f64>() / self.objects_done().max(1) as f64
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
    /// Redundant load balancer updates while idle.
    pub(crate) redundant_load_balancer_updates: f64,
    /// Node conditions written while idle.
    pub(crate) condition_writes: f64,
    /// Duplicate Node condition writes while idle.
    pub(crate) duplicate_condition_writes: f64,
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
    /// Redundant load balancer updates over the whole run (`None` in results written before
    /// they were counted).
    pub(crate) redundant_load_balancer_updates: Option<f64>,
    /// Node conditions written over the whole run (audit log).
    pub(crate) condition_writes: Option<f64>,
    /// Duplicate Node condition writes over the whole run (audit log).
    pub(crate) duplicate_condition_writes: Option<f64>,
    /// The scenario that timed out, when one did; the CCM's later scenarios were skipped.
    pub(crate) timed_out: Option<String>,
    /// Which run of `--repeat` this was, from 0 (0 in results written before repeats).
    pub(crate) repeat: usize,
}

/// The JSON written to `--out`.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub(crate) struct Report {
    /// The settings both CCMs ran with.
    pub(crate) settings: Settings,
    /// Where.
    pub(crate) machine: Machine,
    /// One per CCM, in the order run.
    pub(crate) results: Vec<CcmResult>,
}

/// The settings both CCMs ran with.
#[derive(Serialize, Deserialize, Debug, Clone)]
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
    /// The driver's watch encoding (`json` in runs before it was recorded).
    #[serde(default = "json")]
    pub(crate) driver_watch: String,
    /// Both CCMs' `--kube-api-content-type`, if set.
    #[serde(default)]
    pub(crate) content_type: Option<String>,
}

fn json() -> String {
    "json".to_owned()
}

/// The machine.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub(crate) struct Machine {
    pub(crate) cpus: usize,
    pub(crate) kernel: String,
}

/// A cell of the table: a value, a note (a timeout), or nothing.
#[derive(Clone, Debug, PartialEq)]
enum Cell {
    Value(f64),
    /// Over the runs of `--repeat`: their median, lowest and highest.
    Runs {
        median: f64,
        min: f64,
        max: f64,
    },
    Note(String),
    None,
}

impl Cell {
    fn value(&self) -> Option<f64> {
        match self {
            Self::Value(v) | Self::Runs { median: v, .. } => Some(*v),
            Self::Note(_) | Self::None => None,
        }
    }

    /// The cell of a row over several runs: the median and range of their values, or, when
    /// a run has none (a timeout, a scenario not run), that run's cell.
    fn over_runs<'a>(cells: impl IntoIterator<Item = &'a Cell>) -> Cell {
        let cells: Vec<&Cell> = cells.into_iter().collect();
        if let Some(odd) = cells.iter().find(|c| c.value().is_none()) {
            return (*odd).clone();
        }
        let mut values: Vec<f64> = cells.iter().filter_map(|c| c.value()).collect();
        values.sort_by(f64::total_cmp);
        let n = values.len();
        match n {
            0 => Cell::None,
            1 => Cell::Value(values[0]),
            _ => Cell::Runs {
                median: if n % 2 == 1 {
                    values[n / 2]
                } else {
                    (values[n / 2 - 1] + values[n / 2]) / 2.0
                },
                min: values[0],
                max: values[n - 1],
            },
        }
    }

    fn show(&self) -> String {
        match self {
            Self::Value(v) => format!("{v:.2}"),
            Self::Runs { median, min, max } => format!("{median:.2} ({min:.2}–{max:.2})"),
            Self::Note(n) => n.clone(),
            Self::None => "-".to_owned(),
        }
    }
}

impl From<Option<f64>> for Cell {
    fn from(v: Option<f64>) -> Self {
        v.map_or(Self::None, Self::Value)
    }
}

/// What a row is held to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    /// Nothing: a figure to read.
    None,
    /// Rust/Go at most this.
    Ratio(f64),
    /// A time (seconds, CPU time): Rust/Go at most 1, up to 2 % over counted as equal
    /// (noise).
    Seconds,
    /// Ours is 0.
    Zero,
}

/// One row of the table.
struct Row {
    label: String,
    rust: Cell,
    go: Cell,
    target: Target,
    /// Set when a CCM did not finish the row's scenario: no ratio, and who after the
    /// verdict.
    timed_out: Option<TimedOut>,
    /// Said after the verdict.
    note: Option<&'static str>,
}

/// Which CCM did not finish a scenario, and how far each got.
#[derive(Clone, Copy, Debug)]
struct TimedOut {
    rust: Option<usize>,
    go: Option<usize>,
}

impl TimedOut {
    fn who(self) -> &'static str {
        match (self.rust, self.go) {
            (Some(_), Some(_)) => "both timed out",
            (Some(_), None) => "rust timed out",
            _ => "go timed out",
        }
    }

    /// Whether Rust was ahead of or level with Go: it finished and Go did not, or both
    /// timed out and Rust had done at least as many objects.
    fn rust_ahead(self) -> bool {
        match (self.rust, self.go) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(r), Some(g)) => r >= g,
        }
    }
}

impl Row {
    fn new(label: impl Into<String>, rust: impl Into<Cell>, go: impl Into<Cell>) -> Self {
        Self {
            label: label.into(),
            rust: rust.into(),
            go: go.into(),
            target: Target::None,
            timed_out: None,
            note: None,
        }
    }

    fn target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }

    fn ratio(&self) -> Option<f64> {
        if self.timed_out.is_some() {
            return None;
        }
        match (self.rust.value(), self.go.value()) {
            (Some(r), Some(g)) if g > 0.0 => Some(r / g),
            _ => None,
        }
    }

    /// The verdict: the target, and "met" or "**missed**".
    fn verdict(&self) -> String {
        let verdict = match (self.target, self.timed_out) {
            (Target::None, _) => String::new(),
            (Target::Zero, _) => match self.rust.value() {
                Some(0.0) => "0 met".to_owned(),
                Some(_) => "0 **missed**".to_owned(),
                None => "0".to_owned(),
            },
            (Target::Seconds, Some(t)) if t.rust_ahead() => "≤ 1 met".to_owned(),
            (Target::Seconds, Some(_)) => "≤ 1 **missed**".to_owned(),
            (Target::Ratio(_), Some(_)) => "-".to_owned(),
            (Target::Seconds, None) => match self.ratio() {
                Some(r) if r <= 1.0 => "≤ 1 met".to_owned(),
                Some(r) if r <= 1.02 => "≤ 1 met (equal within 2 %)".to_owned(),
                Some(_) => "≤ 1 **missed**".to_owned(),
                None => String::new(),
            },
            (Target::Ratio(t), None) => match self.ratio() {
                Some(r) if r <= t => format!("≤ {t} met"),
                Some(_) => format!("≤ {t} **missed**"),
                None => String::new(),
            },
        };
        match self.timed_out.map(TimedOut::who).or(self.note) {
            Some(who) if verdict.is_empty() => format!("({who})"),
            Some(who) => format!("{verdict} ({who})"),
            None => verdict,
        }
    }
}

/// The comparison table (Markdown), one row per measure, with Rust/Go when both ran and
/// the verdict against the target (see `docs/benchmarks.md`, "Targets").
/// The scenarios of the report in the order they run (unknown ones after, by name).
fn scenario_order(report: &Report) -> Vec<&String> {
    const ORDER: [&str; 4] = ["node_init", "load_balancers", "lb_new_nodes", "routes"];
    let mut names: Vec<&String> = report
        .results
        .iter()
        .flat_map(|r| r.scenarios.keys())
        .collect();
    names.sort_by_key(|n| {
        (
            ORDER.iter().position(|o| o == n).unwrap_or(ORDER.len()),
            n.as_str(),
        )
    });
    names.dedup();
    names
}

pub(crate) fn table(report: &Report) -> String {
    render(&rows_over_runs(report))
}

/// The rows of a report with several runs of `--repeat`: each row's cells are the median
/// and range of that row in each run, the ratio that of the medians.
fn rows_over_runs(report: &Report) -> Vec<Row> {
    let runs: std::collections::BTreeSet<usize> = report.results.iter().map(|r| r.repeat).collect();
    if runs.len() <= 1 {
        return rows(report);
    }
    let per_run: Vec<Vec<Row>> = runs
        .iter()
        .map(|&n| {
            let mut one = report.clone();
            one.results.retain(|r| r.repeat == n);
            rows(&one)
        })
        .collect();
    labels_in_order(&per_run)
        .into_iter()
        .map(|label| {
            let same: Vec<&Row> = per_run
                .iter()
                .filter_map(|rows| rows.iter().find(|r| &r.label == label))
                .collect();
            Row {
                label: label.clone(),
                rust: Cell::over_runs(same.iter().map(|r| &r.rust)),
                go: Cell::over_runs(same.iter().map(|r| &r.go)),
                target: same[0].target,
                timed_out: same.iter().find_map(|r| r.timed_out),
                note: same.iter().find_map(|r| r.note),
            }
        })
        .collect()
}

/// The labels of every run's rows, each run's order kept: a label only some runs have (a
/// cloud method called in one run only) goes right after the row it follows there, not
/// at the end of the table.
fn labels_in_order(per_run: &[Vec<Row>]) -> Vec<&String> {
    let mut labels: Vec<&String> = Vec::new();
    for rows in per_run {
        let mut at = 0;
        for row in rows {
            match labels.iter().position(|l| *l == &row.label) {
                Some(i) => at = i + 1,
                None => {
                    labels.insert(at, &row.label);
                    at += 1;
                }
            }
        }
    }
    labels
}

/// The rows of one run (one result per CCM).
fn rows(report: &Report) -> Vec<Row> {
    let get = |name: &str| report.results.iter().find(|r| r.name == name);
    let (rust, go) = (get("rust"), get("go"));
    let mut rows: Vec<Row> = Vec::new();
    let scenario_names = scenario_order(report);
    // A scenario a CCM did not finish: how far it got (0 when skipped after an earlier
    // timeout); `None` when it finished or never ran.
    let unfinished = |r: Option<&CcmResult>, s: &str| -> Option<usize> {
        let r = r?;
        match r.scenarios.get(s) {
            Some(x) if x.timed_out => Some(x.done),
            Some(_) => None,
            None => r.timed_out.is_some().then_some(0),
        }
    };
    for s in scenario_names {
        let timed_out = match (unfinished(rust, s), unfinished(go, s)) {
            (None, None) => None,
            (r, g) => Some(TimedOut { rust: r, go: g }),
        };
        let cell = |r: Option<&CcmResult>, f: &dyn Fn(&ScenarioResult) -> f64| -> Cell {
            match r {
                Some(r) => match r.scenarios.get(s) {
                    // NaN: not measured (older results) or nothing to divide.
                    Some(x) => Some(f(x)).filter(|v| !v.is_nan()).into(),
                    None if r.timed_out.is_some() => Cell::Note("skipped".into()),
                    None => Cell::None,
                },
                None => Cell::None,
            }
        };
        let seconds_cell = |r: Option<&CcmResult>| match r.and_then(|r| r.scenarios.get(s)) {
            Some(x) if x.timed_out => Cell::Note(format!("timed out: {}/{}", x.done, x.objects)),
            _ => cell(r, &|x| x.seconds),
        };
        rows.push(Row {
            label: format!("{s}: seconds"),
            rust: seconds_cell(rust),
            go: seconds_cell(go),
            target: Target::Seconds,
            timed_out,
            note: None,
        });
        let mut row = |label: &str, f: &dyn Fn(&ScenarioResult) -> f64, target: Target| {
            let mut row = Row::new(format!("{s}: {label}"), cell(rust, f), cell(go, f));
            row.target = target;
            row.timed_out = timed_out;
            rows.push(row);
        };
        // The driver's creates wait on the same API server as the CCM's writes: a CCM
        // whose requests cost the server more makes them slower.
        let node_init_target = |t: Target| if s == "node_init" { t } else { Target::None };
        row(
            "creating them took (s)",
            &|x| x.create_seconds,
            node_init_target(Target::Seconds),
        );
        row(
            "API server + etcd CPU ms per object",
            &|x| 1000.0 * x.server_cpu_seconds.unwrap_or(f64::NAN) / x.objects_done().max(1) as f64,
            node_init_target(Target::Seconds),
        );
        let api_target = if s == "node_init" {
            Target::Ratio(1.0)
        } else {
            Target::None
        };
        row(
            "API requests per object",
            &|x| x.api_requests / x.objects_done().max(1) as f64,
            api_target,
        );
        row(
            "cloud calls per object",
            &ScenarioResult::cloud_calls_per_object,
            Target::None,
        );
        // By method: every method either CCM called in this scenario.
        let mut methods: Vec<&String> = [rust, go]
            .into_iter()
            .flatten()
            .filter_map(|r| r.scenarios.get(s))
            .flat_map(|x| {
                x.cloud_calls
                    .iter()
                    .filter(|(_, v)| **v != 0.0)
                    .map(|(m, _)| m)
            })
            .collect();
        methods.sort();
        methods.dedup();
        for m in methods {
            row(
                &format!("cloud calls per object: {m}"),
                &|x| x.cloud_calls.get(m).copied().unwrap_or(0.0) / x.objects_done().max(1) as f64,
                Target::None,
            );
        }
        row("CPU seconds", &|x| x.cpu_seconds, Target::Ratio(0.5));
        // The CCM's requests as the API server saw them (audit log), by kind.
        let mut kinds: Vec<&String> = [rust, go]
            .into_iter()
            .flatten()
            .filter_map(|r| r.scenarios.get(s))
            .flat_map(|x| x.requests.keys())
            .collect();
        kinds.sort();
        kinds.dedup();
        for kind in kinds {
            let stats = |x: &ScenarioResult| x.requests.get(kind).cloned().unwrap_or_default();
            row(
                &format!("API server saw per object: {kind}"),
                &|x| stats(x).count / x.objects_done().max(1) as f64,
                Target::None,
            );
            if kind.starts_with("watch") {
                continue;
            }
            row(
                &format!("API server ms each: {kind}"),
                &|x| {
                    let r = stats(x);
                    1000.0 * r.server_seconds / r.count
                },
                Target::None,
            );
            let has_bodies = [rust, go]
                .into_iter()
                .flatten()
                .filter_map(|r| r.scenarios.get(s))
                .any(|x| stats(x).body_bytes > 0.0);
            if has_bodies {
                row(
                    &format!("body bytes each: {kind}"),
                    &|x| {
                        let r = stats(x);
                        r.body_bytes / r.count
                    },
                    Target::None,
                );
            }
        }
    }
    let ran_idle = |r: Option<&CcmResult>| r.is_some_and(|r| r.idle.is_some());
    if ran_idle(rust) || ran_idle(go) {
        let timed_out = match (
            rust.and_then(|r| r.timed_out.as_ref()),
            go.and_then(|r| r.timed_out.as_ref()),
        ) {
            (None, None) => None,
            (r, g) => Some(TimedOut {
                rust: r.map(|_| 0),
                go: g.map(|_| 0),
            }),
        };
        let idle = |r: Option<&CcmResult>, f: fn(&IdleResult) -> f64| match r {
            Some(r) => match &r.idle {
                Some(i) => Cell::Value(f(i)),
                None if r.timed_out.is_some() => Cell::Note("skipped".into()),
                None => Cell::None,
            },
            None => Cell::None,
        };
        let mut row = |label: &str, f: fn(&IdleResult) -> f64, target: Target| {
            let mut row = Row::new(format!("idle: {label}"), idle(rust, f), idle(go, f));
            row.target = target;
            row.timed_out = timed_out;
            rows.push(row);
        };
        row(
            "CPU seconds per minute",
            |x| x.cpu_seconds * 60.0 / x.seconds.max(0.001),
            Target::Ratio(0.5),
        );
        row(
            "API requests per minute",
            |x| x.api_requests_per_minute,
            Target::None,
        );
        row(
            "cloud calls per minute",
            |x| x.cloud_calls_per_minute.values().sum(),
            Target::None,
        );
        row("max RSS (MiB)", |x| x.max_rss_mib, Target::Ratio(0.25));
    }
    rows.push(
        Row::new(
            "duplicate route creates",
            rust.map(|r| r.duplicate_route_creates),
            go.map(|r| r.duplicate_route_creates),
        )
        .target(Target::Zero),
    );
    rows.push(
        Row::new(
            "redundant load-balancer updates",
            rust.and_then(|r| r.redundant_load_balancer_updates),
            go.and_then(|r| r.redundant_load_balancer_updates),
        )
        .target(Target::Zero),
    );
    rows.push(
        Row::new(
            "duplicate Node condition writes",
            rust.and_then(|r| r.duplicate_condition_writes),
            go.and_then(|r| r.duplicate_condition_writes),
        )
        .target(Target::Zero),
    );
    // Whole-run figures of a CCM that timed out cover less work: the ratio stands, noted.
    let whole_run = match (
        rust.and_then(|r| r.timed_out.as_ref()),
        go.and_then(|r| r.timed_out.as_ref()),
    ) {
        (None, None) => None,
        (r, g) => Some(TimedOut {
            rust: r.map(|_| 0),
            go: g.map(|_| 0),
        }),
    };
    for (label, f, target) in [
        (
            "peak RSS (MiB)",
            (|r: &CcmResult| r.peak_rss_mib) as fn(&CcmResult) -> f64,
            0.25,
        ),
        ("CPU seconds, whole run", |r| r.total_cpu_seconds, 0.5),
    ] {
        let mut row = Row::new(label, rust.map(f), go.map(f)).target(Target::Ratio(target));
        row.note = whole_run.map(TimedOut::who);
        rows.push(row);
    }
    rows
}

/// The rows as a Markdown table, columns padded.
fn render(rows: &[Row]) -> String {
    let lines: Vec<[String; 5]> = rows
        .iter()
        .map(|row| {
            [
                row.label.clone(),
                row.rust.show(),
                row.go.show(),
                row.ratio()
                    .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}")),
                row.verdict(),
            ]
        })
        .collect();
    let header = [
        "measure".to_owned(),
        "rust".to_owned(),
        "go".to_owned(),
        "rust/go".to_owned(),
        "target".to_owned(),
    ];
    let width = |i: usize| {
        lines
            .iter()
            .chain([&header])
            .map(|l| l[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let w: Vec<usize> = (0..5).map(width).collect();
    let line = |l: &[String; 5]| {
        format!(
            "| {:<w0$} | {:>w1$} | {:>w2$} | {:>w3$} | {:<w4$} |\n",
            l[0],
            l[1],
            l[2],
            l[3],
            l[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4]
        )
    };
    let mut out = String::from("\n");
    out += &line(&header);
    out += &format!(
        "|{}|{}:|{}:|{}:|{}|\n",
        "-".repeat(w[0] + 2),
        "-".repeat(w[1] + 1),
        "-".repeat(w[2] + 1),
        "-".repeat(w[3] + 1),
        "-".repeat(w[4] + 2)
    );
    for l in &lines {
        out += &line(l);
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
    let scenarios = scenario_order(report);
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
                driver_watch: "protobuf".into(),
                content_type: None,
            },
            machine: Machine {
                cpus: 2,
                kernel: "test".into(),
            },
            results: vec![run("rust", 2.0, 10.0), run("go", 4.0, 40.0)],
        }
    }

    /// The cells of the row labelled `label`: rust, go, rust/go, target.
    fn row(t: &str, label: &str) -> [String; 4] {
        let cells: Vec<String> = t
            .lines()
            .find(|l| l.split('|').nth(1).is_some_and(|c| c.trim() == label))
            .unwrap_or_else(|| panic!("no {label} row in\n{t}"))
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect();
        [
            cells[2].clone(),
            cells[3].clone(),
            cells[4].clone(),
            cells[5].clone(),
        ]
    }

    #[test]
    fn the_api_servers_view_is_shown_per_object_and_per_request_kind() {
        let mut r = report();
        let stats = |count: f64, seconds: f64, bytes: f64| crate::audit::RequestStats {
            count,
            failed: 0.0,
            server_seconds: seconds,
            body_bytes: bytes,
        };
        for (result, (cpu, kind)) in r
            .results
            .iter_mut()
            .zip([(0.08, "patch nodes"), (0.1, "update nodes")])
        {
            let s = result.scenarios.get_mut("node_init").unwrap();
            s.server_cpu_seconds = Some(cpu);
            s.create_seconds = 1.0;
            s.requests = BTreeMap::from([
                (kind.to_owned(), stats(10.0, 0.1, 7000.0)),
                ("watch nodes".to_owned(), stats(1.0, 0.0, 0.0)),
            ]);
        }
        let t = table(&r);
        assert_eq!(
            row(&t, "node_init: API server + etcd CPU ms per object"),
            ["8.00", "10.00", "0.80", "≤ 1 met"]
        );
        assert_eq!(
            row(&t, "node_init: creating them took (s)")[2..],
            ["1.00", "≤ 1 met"]
        );
        assert_eq!(
            row(&t, "node_init: API server saw per object: patch nodes")[..2],
            ["1.00", "0.00"]
        );
        assert_eq!(
            row(&t, "node_init: API server ms each: update nodes")[..2],
            ["-", "10.00"]
        );
        assert_eq!(
            row(&t, "node_init: body bytes each: patch nodes")[..2],
            ["700.00", "-"]
        );
        // Watches last: counted, not timed, no bodies.
        assert_eq!(
            row(&t, "node_init: API server saw per object: watch nodes")[..2],
            ["0.10", "0.10"]
        );
        assert!(!t.contains("ms each: watch"), "{t}");
        // Results from before the API server was measured: no figure, no verdict.
        let old = report();
        assert_eq!(
            row(
                &table(&old),
                "node_init: API server + etcd CPU ms per object"
            )[..3],
            ["-", "-", "-"]
        );
    }

    #[test]
    fn repeated_runs_show_the_median_and_range_and_divide_the_medians() {
        let one = report();
        let mut r = report();
        r.results.clear();
        // Three runs: rust 2, 3, 10 s; go 4, 4, 6 s (and so on for the other figures).
        for (n, (rust, go)) in [(2.0, 4.0), (3.0, 4.0), (10.0, 6.0)]
            .into_iter()
            .enumerate()
        {
            for (result, seconds) in [(&one.results[0], rust), (&one.results[1], go)] {
                let mut result = result.clone();
                result.repeat = n;
                result.scenarios.get_mut("node_init").unwrap().seconds = seconds;
                r.results.push(result);
            }
        }
        let t = table(&r);
        assert_eq!(
            row(&t, "node_init: seconds"),
            ["3.00 (2.00–10.00)", "4.00 (4.00–6.00)", "0.75", "≤ 1 met"]
        );
        // The same in every run: one value.
        assert_eq!(
            row(&t, "peak RSS (MiB)")[..3],
            ["10.00 (10.00–10.00)", "40.00 (40.00–40.00)", "0.25"]
        );
        // An even number of runs: the mean of the middle two.
        r.results.retain(|x| x.repeat < 2);
        assert_eq!(row(&table(&r), "node_init: seconds")[0], "2.50 (2.00–3.00)");
        // One run, as before.
        assert_eq!(row(&table(&one), "node_init: seconds")[0], "2.00");
    }

    #[test]
    fn a_row_only_some_runs_have_stays_beside_its_neighbours() {
        let one = report();
        let mut r = report();
        r.results.clear();
        for n in 0..2 {
            for result in &one.results {
                let mut result = result.clone();
                result.repeat = n;
                if n == 1 {
                    let calls = &mut result.scenarios.get_mut("node_init").unwrap().cloud_calls;
                    calls.insert("list_routes".to_owned(), 1.0);
                }
                r.results.push(result);
            }
        }
        let t = table(&r);
        let labels: Vec<&str> = t
            .lines()
            .filter_map(|l| l.split('|').nth(1).map(str::trim))
            .collect();
        let at = |label: &str| labels.iter().position(|l| *l == label).unwrap();
        let routes = at("node_init: cloud calls per object: list_routes");
        assert_eq!(
            labels[routes - 1],
            "node_init: cloud calls per object: instance_metadata",
            "{t}"
        );
        assert!(routes < at("peak RSS (MiB)"), "{t}");
    }

    #[test]
    fn the_table_divides_rust_by_go() {
        let mut r = report();
        for (c, redundant, duplicates) in [(0, 0.0, 0.0), (1, 7.0, 3.0)] {
            r.results[c].redundant_load_balancer_updates = Some(redundant);
            r.results[c].duplicate_condition_writes = Some(duplicates);
        }
        let t = table(&r);
        assert_eq!(row(&t, "node_init: seconds")[2..], ["0.50", "≤ 1 met"]);
        assert_eq!(row(&t, "peak RSS (MiB)")[2..], ["0.25", "≤ 0.25 met"]);
        assert_eq!(row(&t, "node_init: cloud calls per object")[2], "1.00");
        // By method, under the total.
        assert_eq!(
            row(&t, "node_init: cloud calls per object: instance_metadata"),
            ["1.00", "1.00", "1.00", ""]
        );
        assert!(
            !t.contains("list_routes"),
            "no row for a method never called:\n{t}"
        );
        assert_eq!(
            row(&t, "duplicate route creates"),
            ["0.00", "0.00", "-", "0 met"]
        );
        assert_eq!(
            row(&t, "redundant load-balancer updates"),
            ["0.00", "7.00", "0.00", "0 met"]
        );
        assert_eq!(
            row(&t, "duplicate Node condition writes"),
            ["0.00", "3.00", "0.00", "0 met"]
        );
        assert!(!t.contains("idle:"), "{t}");

        // Ours with duplicates: missed.
        r.results[0].duplicate_condition_writes = Some(2.0);
        let t = table(&r);
        assert_eq!(
            row(&t, "duplicate Node condition writes")[3],
            "0 **missed**"
        );
        // Slower by 1 %: equal within noise; by 10 %: missed.
        r.results[0].scenarios.get_mut("node_init").unwrap().seconds = 4.04;
        assert_eq!(
            row(&table(&r), "node_init: seconds")[3],
            "≤ 1 met (equal within 2 %)"
        );
        r.results[0].scenarios.get_mut("node_init").unwrap().seconds = 4.4;
        assert_eq!(row(&table(&r), "node_init: seconds")[3], "≤ 1 **missed**");
    }

    #[test]
    fn a_ccm_that_timed_out_is_shown_so_and_its_skipped_scenarios_too() {
        let mut r = report();
        let go = &mut r.results[1];
        go.timed_out = Some("node_init".into());
        let s = go.scenarios.get_mut("node_init").unwrap();
        s.timed_out = true;
        s.done = 6;
        s.cloud_calls = BTreeMap::from([("instance_metadata".to_owned(), 12.0)]);
        // Rust ran a scenario Go skipped.
        let routes = r.results[0].scenarios["node_init"].clone();
        r.results[0].scenarios.insert("routes".into(), routes);
        let t = table(&r);
        assert_eq!(
            row(&t, "node_init: seconds"),
            ["2.00", "timed out: 6/10", "-", "≤ 1 met (go timed out)"]
        );
        // Per object done: 12 calls for 6 Nodes.
        assert_eq!(
            row(&t, "node_init: cloud calls per object"),
            ["1.00", "2.00", "-", "(go timed out)"]
        );
        assert_eq!(
            row(&t, "node_init: CPU seconds")[2..],
            ["-", "- (go timed out)"]
        );
        assert_eq!(
            row(&t, "routes: seconds"),
            ["2.00", "skipped", "-", "≤ 1 met (go timed out)"]
        );
        assert_eq!(row(&t, "peak RSS (MiB)")[3], "≤ 0.25 met (go timed out)");

        // The other way round: ours timed out.
        let mut r = report();
        r.results[0].timed_out = Some("node_init".into());
        let s = r.results[0].scenarios.get_mut("node_init").unwrap();
        s.timed_out = true;
        s.done = 3;
        assert_eq!(
            row(&table(&r), "node_init: seconds"),
            [
                "timed out: 3/10",
                "4.00",
                "-",
                "≤ 1 **missed** (rust timed out)"
            ]
        );
    }

    #[test]
    fn results_written_before_the_new_fields_still_read() {
        let old = r#"{"settings": {"nodes": 10, "services": 0, "qps": 20.0, "burst": 30,
            "workers": 1, "latency_ms": 5}, "machine": {"cpus": 2, "kernel": "k"},
            "results": [{"name": "rust", "scenarios": {"node_init": {"objects": 10,
            "seconds": 2.0, "api_requests": 30.0, "cloud_calls": {"instance_metadata": 10.0}}},
            "peak_rss_mib": 10.0, "duplicate_route_creates": 0.0}]}"#;
        let report: Report = serde_json::from_str(old).unwrap();
        let rust = &report.results[0];
        assert_eq!(rust.duplicate_condition_writes, None);
        assert_eq!(rust.timed_out, None);
        assert_eq!(rust.scenarios["node_init"].objects_done(), 10);
        let t = table(&report);
        assert_eq!(row(&t, "node_init: API requests per object")[0], "3.00");
        assert_eq!(row(&t, "duplicate Node condition writes")[0], "-");
        assert_eq!(row(&t, "redundant load-balancer updates")[3], "0");
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
