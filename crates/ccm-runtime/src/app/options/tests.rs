//! Unit tests of `options`.

use super::*;

fn parse(args: &[&str]) -> Options {
    Options::from_args(std::iter::once("ccm").chain(args.iter().copied())).unwrap()
}

#[test]
fn defaults_match_go() {
    let o = parse(&[]);
    assert_eq!(o.kube_api_qps, 20.0);
    assert_eq!(o.kube_api_burst, 30);
    assert!(o.leader_election.leader_elect);
    assert_eq!(
        o.leader_election.leader_elect_lease_duration,
        Duration::from_secs(15)
    );
    assert_eq!(
        o.leader_election.leader_elect_renew_deadline,
        Duration::from_secs(10)
    );
    assert_eq!(
        o.leader_election.leader_elect_retry_period,
        Duration::from_secs(2)
    );
    assert_eq!(
        o.leader_election.leader_elect_resource_name,
        "cloud-controller-manager"
    );
    assert_eq!(
        o.leader_election.leader_elect_resource_namespace,
        "kube-system"
    );
    assert_eq!(o.controllers, vec!["*"]);
    assert_eq!(o.concurrent_service_syncs, 1);
    assert_eq!(o.concurrent_node_syncs, 1);
    assert_eq!(o.concurrent_node_status_updates, 0);
    assert_eq!(o.node_monitor_period, Duration::from_secs(5));
    assert_eq!(o.node_status_update_frequency, Duration::from_secs(300));
    assert_eq!(o.route_reconciliation_period, Duration::from_secs(10));
    assert_eq!(o.cluster_name, "kubernetes");
    assert_eq!(o.cluster_cidr, "");
    assert!(o.ignored_flags().is_empty());
    assert!(o.print_request().is_none());
    assert!(o.configure_cloud_routes);
    assert_eq!(o.serving.bind_address.to_string(), "0.0.0.0");
    assert_eq!(o.serving.secure_port, 10258);
}

#[test]
fn go_style_arguments_parse() {
    let o = parse(&[
        "--cloud-provider=fake",
        "--leader-elect=false",
        "--configure-cloud-routes=false",
        "--controllers=*,-route",
        "--node-status-update-frequency=1m30s",
        "--kube-api-qps=50",
        "--v=4",
        "--allocate-node-cidrs",
        "--contention-profiling",
        "--profiling=false",
    ]);
    assert_eq!(o.cloud_provider, "fake");
    assert!(!o.leader_election.leader_elect);
    assert!(!o.configure_cloud_routes);
    assert_eq!(
        o.ignored_flags(),
        vec![
            ("--contention-profiling", IGNORED[0].1),
            ("--profiling", "no profiling endpoints are served")
        ]
    );
    assert!(o.allocate_node_cidrs, "a bare bool flag is true, as in Go");
    assert_eq!(o.controllers, vec!["*", "-route"]);
    assert_eq!(o.node_status_update_frequency, Duration::from_secs(90));
    assert_eq!(o.verbosity, 4);
    assert!(o.validate().is_ok());
}

#[test]
fn load_balancer_classes_repeat_or_split_on_commas() {
    let o = Options::try_parse_from([
        "ccm",
        "--cloud-provider=x",
        "--load-balancer-class=a.example/lb,b.example/lb",
        "--load-balancer-class=c.example/lb",
        "--manage-services-without-class=false",
    ])
    .unwrap();
    o.validate().unwrap();
    let classes = o.load_balancer_classes().unwrap();
    assert_eq!(
        classes.classes().collect::<Vec<_>>(),
        ["a.example/lb", "b.example/lb", "c.example/lb"]
    );
    assert!(!classes.manages_without_class());
    let go =
        Options::try_parse_from(["ccm", "--cloud-provider=x", "--load-balancer-class="]).unwrap();
    assert!(
        go.load_balancer_classes().unwrap().is_go(),
        "an empty value is no class"
    );
}

#[test]
fn validation_names_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&[], "--cloud-provider: is required"),
        (
            &["--cloud-provider=x", "--kube-api-qps=0"],
            "--kube-api-qps: must be greater than 0, got 0",
        ),
        (
            &["--cloud-provider=x", "--kube-api-burst=0"],
            "--kube-api-burst: must be at least 1, got 0",
        ),
        (
            &["--cloud-provider=x", "--concurrent-node-syncs=0"],
            "--concurrent-node-syncs: must be between 1 and 10000, got 0",
        ),
        (
            &[
                "--cloud-provider=x",
                "--concurrent-service-syncs=1000000000",
            ],
            "--concurrent-service-syncs: must be between 1 and 10000, got 1000000000",
        ),
        (
            &["--cloud-provider=x", "--concurrent-node-syncs=10001"],
            "--concurrent-node-syncs: must be between 1 and 10000, got 10001",
        ),
        (
            &["--cloud-provider=x", "--concurrent-node-status-updates=-1"],
            "--concurrent-node-status-updates: must be between 0 and 10000, got -1",
        ),
        (
            &[
                "--cloud-provider=x",
                "--concurrent-node-status-updates=20000",
            ],
            "--concurrent-node-status-updates: must be between 0 and 10000, got 20000",
        ),
        (
            &["--cloud-provider=x", "--load-balancer-class=internal-vip"],
            "--load-balancer-class: \"internal-vip\" is not a load balancer class a controller \
             can claim: it has no prefix (a class is a prefixed qualified name, e.g. \
             example.com/internal-vip)",
        ),
        (
            &[
                "--cloud-provider=x",
                "--manage-services-without-class=false",
            ],
            "--manage-services-without-class: manages no Service: give a load balancer class, \
             or manage the Services without one",
        ),
        (
            &["--cloud-provider=x", "--secure-port=70000"],
            "--secure-port: must be between 0 and 65535, got 70000",
        ),
        (
            &[
                "--cloud-provider=x",
                "--leader-elect-resource-lock=endpoints",
            ],
            "--leader-elect-resource-lock: only \"leases\" is supported, got \"endpoints\"",
        ),
        (
            &["--cloud-provider=x", "--leader-elect-lease-duration=5s"],
            "--leader-elect-lease-duration: must be greater than --leader-elect-renew-deadline",
        ),
        (
            &["--cloud-provider=x", "--node-monitor-period=0s"],
            "--node-monitor-period: must be greater than 0",
        ),
        (
            &["--cloud-provider=x", "--tls-cert-file=/c"],
            "--tls-private-key-file: is required with --tls-cert-file",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(
            parse(args).validate().unwrap_err().to_string(),
            *want,
            "{args:?}"
        );
    }
    // The bounds themselves are accepted.
    assert!(
        parse(&[
            "--cloud-provider=x",
            "--concurrent-service-syncs=10000",
            "--concurrent-node-syncs=10000",
            "--concurrent-node-status-updates=0",
        ])
        .validate()
        .is_ok()
    );
    // Leader election settings do not matter when it is off.
    assert!(
        parse(&[
            "--cloud-provider=x",
            "--leader-elect=false",
            "--leader-elect-resource-lock=x"
        ])
        .validate()
        .is_ok()
    );
}

#[test]
fn v_and_vmodule_become_tracing_directives() {
    let o = parse(&[
        "-v=4",
        "--vmodule=ccm_runtime::controllers=6,node*=2,kube=0",
    ]);
    let directives = o.log_directives_at(o.verbosity);
    assert_eq!(
        directives,
        "debug,kube_client=warn,hyper=warn,rustls=warn,ccm_runtime::controllers=trace,kube=info"
    );
    assert!(
        directives
            .parse::<tracing_subscriber::filter::Targets>()
            .is_ok()
    );
    // The Go glob is reported as ignored; the module paths are not.
    assert_eq!(
        o.ignored_flags()
            .iter()
            .map(|(f, _)| *f)
            .collect::<Vec<_>>(),
        ["--vmodule"]
    );
    assert!(
        parse(&["--vmodule=ccm_runtime=4"])
            .ignored_flags()
            .is_empty()
    );
}

#[test]
fn http2_flags_are_reported_as_ignored() {
    let o = parse(&[
        "--http2-max-streams-per-connection=0x10",
        "--disable-http2-serving",
    ]);
    assert_eq!(o.serving.http2_max_streams_per_connection, 16);
    assert_eq!(
        o.ignored_flags()
            .iter()
            .map(|(f, _)| *f)
            .collect::<Vec<_>>(),
        [
            "--disable-http2-serving",
            "--http2-max-streams-per-connection"
        ]
    );
    assert!(
        parse(&[
            "--http2-max-streams-per-connection=0",
            "--disable-http2-serving=false"
        ])
        .ignored_flags()
        .is_empty()
    );
}

#[test]
fn help_and_version_ask_to_print() {
    assert_eq!(parse(&["-h"]).print_request(), Some(PrintRequest::Help));
    assert_eq!(parse(&["--help=false"]).print_request(), None);
    assert_eq!(
        parse(&["--version"]).print_request(),
        Some(PrintRequest::Version { raw: false })
    );
    assert_eq!(
        parse(&["--version=raw"]).print_request(),
        Some(PrintRequest::Version { raw: true })
    );
    let o = parse(&["--version=v1.36.3"]);
    assert_eq!(o.print_request(), None);
    assert_eq!(o.ignored_flags()[0].0, "--version");
    let v = BinaryVersion {
        version: "1.2.3",
        git_commit: Some("abc1234"),
    };
    assert_eq!(v.render("acme-ccm", false), "acme-ccm v1.2.3 (abc1234)");
    assert!(v.render("acme-ccm", true).contains("GitCommit:\"abc1234\""));
}

#[test]
fn go_webhook_checks() {
    let err = |args: &[&str]| parse(args).validate().unwrap_err().to_string();
    assert_eq!(
        err(&["--cloud-provider=x", "--webhooks=foo"]),
        "--webhooks: \"foo\" is not in the list of known webhooks (there are none)"
    );
    assert!(
        parse(&["--cloud-provider=x", "--webhooks=*"])
            .validate()
            .is_ok()
    );
    assert_eq!(
        err(&["--cloud-provider=x", "--webhook-secure-port=10258"]),
        "--webhook-secure-port: must differ from --secure-port"
    );
    assert_eq!(
        err(&["--cloud-provider=x", "--webhook-secure-port=70000"]),
        "--webhook-secure-port: must be between 0 and 65535, got 70000"
    );
}

#[test]
fn malformed_values_are_clap_errors_naming_the_flag() {
    for (arg, flag) in [
        ("--node-monitor-period=5", "--node-monitor-period"),
        ("--kube-api-burst=many", "--kube-api-burst"),
        ("--bind-address=localhost", "--bind-address"),
        ("--leader-elect=maybe", "--leader-elect"),
    ] {
        let err = Options::from_args(["ccm", arg]).unwrap_err().to_string();
        assert!(err.contains(flag), "{arg}: {err}");
    }
    let err = Options::from_args(["ccm", "--cloud-providr=x"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--cloud-provider"),
        "suggests the right flag: {err}"
    );
}

#[test]
fn node_ownership_flags_default_to_every_node_and_parse_as_pflag_lists() {
    let o = parse(&[]);
    assert!(o.node_provider_id_prefix.is_empty());
    assert_eq!(o.node_selector, "");
    assert!(
        o.node_ownership().unwrap().owns_everything(),
        "Go's behaviour"
    );

    let o = parse(&[
        "--cloud-provider=fake",
        "--node-provider-id-prefix=digitalocean://,do-metal://",
        "--node-provider-id-prefix",
        "fake://",
        "--node-selector=example.com/cloud in (do), !example.com/bare-metal",
    ]);
    assert_eq!(
        o.node_provider_id_prefix,
        ["digitalocean://", "do-metal://", "fake://"],
        "each occurrence a CSV record, appended"
    );
    assert_eq!(
        o.node_selector,
        "example.com/cloud in (do), !example.com/bare-metal"
    );
    assert!(o.validate().is_ok());
    assert!(!o.node_ownership().unwrap().owns_everything());
    // A selector given twice: the last wins, as pflag's strings.
    let o = parse(&["--node-selector=a", "--node-selector=b"]);
    assert_eq!(o.node_selector, "b");
}

#[test]
fn bad_node_ownership_flags_stop_startup_naming_the_flag() {
    for (arg, needle) in [
        ("--node-selector=cloud in do", "found 'do', expected: '('"),
        ("--node-selector=a,", "expected: identifier after ','"),
        ("--node-selector=-a", "invalid label key"),
        ("--node-selector=a>1", "not supported"),
        ("--node-provider-id-prefix=", "empty prefix"),
        ("--node-provider-id-prefix=a://,", "empty prefix"),
        ("--node-provider-id-prefix=hcloud", "\"hcloud://\""),
        ("--node-provider-id-prefix=\"a://", "quoted field"),
    ] {
        let flag = arg.split('=').next().unwrap();
        let err = Options::from_args(["ccm", arg]).unwrap_err().to_string();
        assert!(err.contains(flag), "{arg}: {err}");
        assert!(err.contains(needle), "{arg}: {err}");
    }
    let long = format!("--node-selector=a={}", "b".repeat(5000));
    let err = Options::from_args(["ccm", &long]).unwrap_err().to_string();
    assert!(err.contains("at most 4096"), "{err}");
    // More prefixes than allowed, over several occurrences: a validation error.
    let mut args = vec!["ccm".to_owned(), "--cloud-provider=fake".to_owned()];
    args.extend((0..40).map(|i| format!("--node-provider-id-prefix=p{i}://")));
    let err = Options::from_args(args)
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("--node-provider-id-prefix: 40 prefixes given"),
        "{err}"
    );
}

#[test]
fn the_node_deletion_guard_is_on_by_default_and_can_be_set_or_turned_off() {
    use crate::controllers::node_lifecycle::{GuardLimits, MaxDeletions, NodeDeletionGuard};
    assert_eq!(
        parse(&[]).node_deletion_guard,
        NodeDeletionGuard::On(GuardLimits::default())
    );
    assert_eq!(
        parse(&["--node-deletion-guard=off"]).node_deletion_guard,
        NodeDeletionGuard::Off
    );
    let NodeDeletionGuard::On(limits) =
        parse(&["--node-deletion-guard", "max=5,window=1h"]).node_deletion_guard
    else {
        panic!("on");
    };
    assert_eq!(limits.max, MaxDeletions::Count(5));
    assert_eq!(limits.window, std::time::Duration::from_secs(3600));
    assert_eq!(limits.stop_percent, Some(50), "the default");
    for (arg, needle) in [
        ("--node-deletion-guard=", "empty"),
        ("--node-deletion-guard=max=lots", "max: \"lots\""),
        (
            "--node-deletion-guard=window=0s",
            "window: \"0s\" is out of range",
        ),
        (
            "--node-deletion-guard=stop=2",
            "stop: \"2\" is not a percentage",
        ),
    ] {
        let err = Options::from_args(["ccm", arg]).unwrap_err().to_string();
        assert!(err.contains("--node-deletion-guard"), "{arg}: {err}");
        assert!(err.contains(needle), "{arg}: {err}");
    }
}
