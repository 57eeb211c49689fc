//! Every flag of Go's v1.36 `cloud-controller-manager` is accepted with Go's value syntax,
//! and what Go refuses is refused.
//!
//! The flag list is `tests/data/go-ccm-flags.json`, dumped from Go's own command by
//! `tools/go-ccm-flags` (`scripts/test.sh` regenerates it and fails on a difference). For
//! each flag this test parses values of its pflag type in the forms pflag takes
//! (`--flag=value`, `--flag value`, a bare boolean `--flag`) and values Go rejects; checks
//! that our defaults are Go's; and checks docs/app.md's "Moving from Go" table: a row for
//! every flag, and the rows marked ignored are exactly the flags `Options::ignored_flags`
//! reports. There is no exceptions list.

use std::collections::BTreeSet;

use ccm_runtime::app::Options;
use clap::CommandFactory;

#[derive(Debug)]
struct GoFlag {
    name: String,
    shorthand: Option<String>,
    kind: String,
    default: String,
}

fn go_flags() -> Vec<GoFlag> {
    let json: serde_json::Value =
        serde_json::from_str(include_str!("data/go-ccm-flags.json")).expect("valid JSON");
    let text =
        |v: &serde_json::Value, key: &str| v.get(key).and_then(|s| s.as_str()).map(str::to_owned);
    json.as_array()
        .expect("a list of flags")
        .iter()
        .map(|f| GoFlag {
            name: text(f, "name").expect("name"),
            shorthand: text(f, "shorthand"),
            kind: text(f, "type").expect("type"),
            default: text(f, "default").expect("default"),
        })
        .collect()
}

/// Flags `k8s.io/cloud-provider` has not: ours, and those of the nodeipam flag set that
/// Kubernetes' own `cloud-controller-manager` binary adds (`cmd/cloud-controller-manager`,
/// `NodeIPAMControllerOptions.AddFlags`).
const OURS: &[&str] = &[
    "insecure-serving",
    "shadow",
    "load-balancer-class",
    "manage-services-without-class",
    "service-conditions",
    "metallb-allow-shared-ip",
    "load-balancer-health-period",
    "node-provider-id-prefix",
    "node-selector",
    "node-deletion-guard",
    "node-cidr-mask-size",
    "node-cidr-mask-size-ipv4",
    "node-cidr-mask-size-ipv6",
    "service-cluster-ip-range",
];

fn defined() -> BTreeSet<String> {
    Options::command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect()
}

fn parse(args: &[String]) -> Result<Options, String> {
    Options::from_args(std::iter::once("ccm".to_owned()).chain(args.iter().cloned()))
        .map_err(|e| e.to_string())
}

const BOOLS: &[(&str, bool)] = &[
    ("1", true),
    ("t", true),
    ("T", true),
    ("TRUE", true),
    ("true", true),
    ("True", true),
    ("0", false),
    ("f", false),
    ("F", false),
    ("FALSE", false),
    ("false", false),
    ("False", false),
];

/// Values of a pflag type that Go accepts, and values it refuses.
fn values(flag: &GoFlag) -> (Vec<&'static str>, Vec<&'static str>) {
    match (flag.name.as_str(), flag.kind.as_str()) {
        // Validated by Go right after parsing (logsapi); the registered formats.
        ("logging-format", _) => (vec!["text", "json"], vec!["yaml", "", "Text"]),
        // Go takes any string and fails at its first request with one it cannot encode;
        // ours refuses it at startup (docs/app.md).
        ("kube-api-content-type", _) => (
            vec!["application/vnd.kubernetes.protobuf", "application/json"],
            vec!["abc", "", "application/yaml"],
        ),
        (_, "duration") => (
            vec![
                "0",
                "15s",
                "1m30s",
                "1.5h",
                "100ms",
                "2h45m0.5s",
                "1us",
                "1µs",
                "3ns",
                ".5s",
            ],
            vec![
                "5",
                "5x",
                "",
                "s",
                "1.2.3s",
                "1m30",
                "ten seconds",
                "3000000h",
            ],
        ),
        (_, "int32") => (
            vec![
                "10",
                "0",
                "0x10",
                "010",
                "0o7",
                "0b11",
                "1_000",
                "2147483647",
            ],
            vec!["many", "1.5", "", "2147483648", "1e3", "08"],
        ),
        (_, "int") => (
            vec!["10", "0", "0x10", "010"],
            vec!["many", "1.5", "", "1e3"],
        ),
        (_, "float32") => (
            vec!["20", "0.5", "1e2", ".5", "30."],
            vec!["x", "", "1.2.3", "1,5"],
        ),
        (_, "string") => (vec!["abc", "", "-leading-dash", "a b"], vec![]),
        (_, "stringSlice") => (vec!["a", "a,b", "", "\"a,b\",c"], vec!["a\"b", "\"a"]),
        (_, "ip") => (
            vec!["127.0.0.1", "::1", "0.0.0.0"],
            vec!["localhost", "", "1.2.3", "01.2.3.4"],
        ),
        (_, "Level") => (vec!["0", "4", "10", "+2"], vec!["x", "1.5", "", "0x3"]),
        (_, "pattern=N,...") => (
            vec![
                "",
                "node_controller=2",
                "node*=4,route=2",
                "ccm_runtime::controllers=4",
            ],
            vec!["node", "node=x", "=2"],
        ),
        (_, "mapStringBool") => (
            vec![
                "",
                "AllAlpha=true",
                "AllAlpha=true,AllBeta=False",
                "AllAlpha=1, AllBeta=f",
            ],
            // Go refuses an unknown gate and a locked one set away from its value.
            vec![
                "AllAlpha",
                "AllAlpha=maybe",
                "A=true",
                "APIServerTracing=false",
            ],
        ),
        (_, "quantity") => (
            vec!["0", "64Ki", "1M", "1.5Gi", "100m", "1e3"],
            vec!["x", "", "1.2.3", "1KB"],
        ),
        (_, "int32Slice") => (vec!["", "1", "1,2", "-3"], vec!["x", "1.5", "2147483648"]),
        (_, "namedCertKey") => (
            vec![
                "tls.crt,tls.key",
                "tls.crt,tls.key:example.com,*.example.com",
            ],
            vec!["tls.crt", "", ",tls.key"],
        ),
        (_, "version") => (vec!["raw", "v1.36.3"], vec!["maybe", "", "v1"]),
        (_, "bool") => (vec![], vec!["maybe", "yes", "2", "", "on"]),
        (name, kind) => panic!("--{name}: no test values for Go's type {kind:?}; add them"),
    }
}

fn is_boolean(kind: &str) -> bool {
    kind == "bool" || kind == "version"
}

#[test]
fn every_go_flag_is_accepted_with_a_value_of_its_type() {
    let mut failures = Vec::new();
    let mut check = |args: Vec<String>, ok: bool| {
        let got = parse(&args);
        if got.is_ok() != ok {
            failures.push(format!(
                "{args:?}: want {}, got {got:?}",
                if ok { "ok" } else { "an error" }
            ));
        }
    };
    for flag in go_flags() {
        let long = format!("--{}", flag.name);
        let (good, bad) = values(&flag);
        if is_boolean(&flag.kind) {
            // pflag: `--flag` alone is true; a value only after `=`; the next argument is
            // not a value (Go then refuses it as a positional argument).
            check(vec![long.clone()], true);
            for (spelling, _) in BOOLS {
                check(vec![format!("{long}={spelling}")], true);
            }
            check(vec![long.clone(), "false".into()], false);
        }
        for v in good {
            check(vec![format!("{long}={v}")], true);
            if !is_boolean(&flag.kind) {
                check(vec![long.clone(), v.to_owned()], true);
            }
        }
        for v in bad {
            check(vec![format!("{long}={v}")], false);
        }
        if let Some(short) = &flag.shorthand {
            let short = format!("-{short}");
            if is_boolean(&flag.kind) {
                check(vec![short.clone()], true);
                check(vec![format!("{short}=false")], true);
            } else {
                let (good, bad) = values(&flag);
                for v in good.iter().filter(|v| !v.is_empty()) {
                    check(vec![format!("{short}={v}")], true);
                    check(vec![short.clone(), (*v).to_owned()], true);
                    check(vec![format!("{short}{v}")], true);
                }
                for v in bad.iter().filter(|v| !v.is_empty()) {
                    check(vec![format!("{short}={v}")], false);
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn we_define_only_gos_flags_and_ours() {
    let go: BTreeSet<_> = go_flags().into_iter().map(|f| f.name).collect();
    let extra: Vec<_> = defined()
        .into_iter()
        .filter(|f| !go.contains(f) && !OURS.contains(&f.as_str()))
        .collect();
    assert!(extra.is_empty(), "flags Go does not have: {extra:?}");
}

#[test]
fn defaults_are_gos() {
    let command = Options::command();
    let mut failures = Vec::new();
    for flag in go_flags() {
        let Some(arg) = command
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.name.as_str()))
        else {
            continue;
        };
        let ours: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        if ours.is_empty() {
            // Ignored flags (their Go default is moot) and optional paths.
            continue;
        }
        let ours = if flag.kind.ends_with("Slice") {
            format!("[{}]", ours.join(","))
        } else {
            ours.join(",")
        };
        if ours != flag.default {
            failures.push(format!(
                "--{}: Go {:?}, ours {ours:?}",
                flag.name, flag.default
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn go_spellings_mean_what_they_mean_in_go() {
    let o = parse(&[
        "--leader-elect=False".into(),
        "--cloud-config=".into(),
        "--kubeconfig=".into(),
    ])
    .unwrap();
    assert!(!o.leader_election.leader_elect);
    assert_eq!(o.cloud_config, None, "--cloud-config= is no file");
    assert_eq!(o.kubeconfig, None);
    for (spelling, want) in BOOLS {
        let o = parse(&[format!("--configure-cloud-routes={spelling}")]).unwrap();
        assert_eq!(o.configure_cloud_routes, *want, "{spelling}");
    }
    let o = parse(&["--allow-untagged-cloud".into()]).unwrap();
    assert!(o.allow_untagged_cloud);
    let o = parse(&["--controllers=".into()]).unwrap();
    assert!(o.controllers.is_empty(), "--controllers= is the empty list");
    let o = parse(&[
        "--controllers".into(),
        "*,-route".into(),
        "--controllers=service".into(),
    ])
    .unwrap();
    assert_eq!(o.controllers, ["*", "-route", "service"], "pflag appends");
    let o = parse(&[
        "--kube-api-burst".into(),
        "0x20".into(),
        "--concurrent-node-syncs=010".into(),
    ])
    .unwrap();
    assert_eq!((o.kube_api_burst, o.concurrent_node_syncs), (32, 8));
    let o = parse(&[
        "--leader-elect=false".into(),
        "--leader-elect".into(),
        "--cluster-name=a".into(),
        "--cluster-name=b".into(),
    ])
    .unwrap();
    assert!(
        o.leader_election.leader_elect,
        "the last occurrence wins, as in pflag"
    );
    assert_eq!(o.cluster_name, "b");
    // The serving options' flags, as pflag and the Kubernetes flag types read them.
    let o = parse(&[
        "--authorization-always-allow-paths".into(),
        "\"/a,b\",/c".into(),
        "--authorization-always-allow-paths=/d".into(),
        "--requestheader-allowed-names=".into(),
        "--http2-max-streams-per-connection".into(),
        "0x10".into(),
        "--secure-port=0o17".into(),
        "--tls-cert-file=".into(),
    ])
    .unwrap();
    assert_eq!(o.serving.always_allow_paths(), ["/a,b", "/c", "/d"]);
    assert!(o.serving.request_header_lists()[0].is_empty());
    assert_eq!(o.serving.http2_max_streams_per_connection, 16);
    assert_eq!(o.serving.secure_port, 15);
    assert_eq!(
        o.serving.tls_cert_file(),
        None,
        "--tls-cert-file= is no file"
    );
    let o = parse(&["-v".into(), "5".into()]).unwrap();
    assert_eq!(o.verbosity, 5);
    let o = parse(&["--node-monitor-period".into(), "1m0.5s".into()]).unwrap();
    assert_eq!(
        o.node_monitor_period,
        std::time::Duration::from_millis(60_500)
    );
}

/// docs/app.md's "Moving from Go" table: `| `--flag` | what we do | … |`.
fn docs_table() -> Vec<(String, String)> {
    let doc = include_str!("../../../docs/app.md");
    let section = doc
        .split("\n## Moving from Go")
        .nth(1)
        .expect("docs/app.md has a \"Moving from Go\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|l| {
            let cells: Vec<_> = l.split('|').map(str::trim).collect();
            let flag = cells
                .get(1)?
                .strip_prefix("`--")?
                .split(['`', '='])
                .next()?;
            Some((flag.to_owned(), cells.get(2)?.to_lowercase()))
        })
        .collect()
}

#[test]
fn the_moving_from_go_table_has_every_flag_and_the_ignored_ones_are_reported() {
    let table = docs_table();
    let mut failures = Vec::new();
    for flag in go_flags() {
        let Some((_, what)) = table.iter().find(|(name, _)| *name == flag.name) else {
            failures.push(format!(
                "--{}: no row in docs/app.md's \"Moving from Go\" table",
                flag.name
            ));
            continue;
        };
        let (good, _) = values(&flag);
        let value = good.iter().find(|v| !v.is_empty()).copied().unwrap_or("1");
        let arg = if is_boolean(&flag.kind) {
            format!("--{}", flag.name)
        } else {
            format!("--{}={value}", flag.name)
        };
        let options = parse(std::slice::from_ref(&arg)).unwrap();
        let reported = options
            .ignored_flags()
            .iter()
            .any(|(f, _)| *f == format!("--{}", flag.name));
        let documented = what.starts_with("ignored");
        if reported != documented {
            failures.push(format!(
                "{arg}: docs/app.md says {what:?}, Options::ignored_flags {} it",
                if reported {
                    "reports"
                } else {
                    "does not report"
                }
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
