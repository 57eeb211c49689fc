//! `fake-cloud-controller-manager` as a process, against a real kube-apiserver + etcd: flags,
//! RBAC with the shipped manifests, leader election between replicas.

mod common;

use std::time::Duration;

use ccm_test::fixtures::{ServiceBuilder, has_lb_finalizer, tainted_node};
use ccm_test::net::{free_port, http_get};
use ccm_test::process::{CcmProcess, Finished, Signal};
use ccm_test::{ControlPlane, eventually, unique_name};
use common::{
    BIN, NodeAndOrphan, WAIT, assert_nothing_refused, base_args, cloud_config, create_node,
    lease_holder, quick_leader_election, serving_on, wait_initialized, wait_leader,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, PostParams};
use tempfile::TempDir;

/// A control plane of the test's own.
async fn control_plane() -> ControlPlane {
    common::control_plane(ControlPlane::builder()).await
}

/// What most tests here start from: a control plane of their own, and the flags of a
/// controller manager for it with a cloud-config whose Nodes are all instances, in the
/// folder that comes last (kept until the test ends).
async fn set_up() -> (ControlPlane, Vec<String>, TempDir) {
    let cp = control_plane().await;
    let dir = tempfile::tempdir().unwrap();
    let config = cloud_config(dir.path(), "nodesAreInstances: true\n");
    let args = base_args(cp.kubeconfig_path(), &config);
    (cp, args, dir)
}

/// Waits until the controller manager logs that it starts a controller.
async fn wait_started(ccm: &CcmProcess) {
    ccm.wait_log("starting controller", WAIT).await;
}

#[tokio::test]
async fn runs_under_the_shipped_least_privilege_role() {
    let cp = &control_plane().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = common::service_account_under(cp, "deploy/rbac.yaml").await;
    let (lifecycle, config) = NodeAndOrphan::new("rbac", dir.path());
    let mut args = base_args(&kubeconfig, &config);
    args.push("--leader-elect=true".into()); // the Role allows only the default Lease name
    args.push("--node-monitor-period=500ms".into());
    let ccm = CcmProcess::start(BIN, &args);

    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    lifecycle.create(&nodes).await;
    let node = wait_initialized(&nodes, &lifecycle.name, &ccm).await;
    assert_eq!(
        node.metadata
            .labels
            .unwrap_or_default()
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("zone-a")
    );
    // A LoadBalancer Service gets its finalizer and ingress.
    let services: Api<Service> = Api::namespaced(cp.client().unwrap(), "default");
    let svc_name = unique_name("rbac-lb");
    common::create_load_balancer(&services, &svc_name).await;
    let svc = common::wait_ingress(&services, &svc_name, &ccm).await;
    assert!(has_lb_finalizer(&svc));

    lifecycle.wait_orphan_deleted(&nodes, &ccm).await;
    // The event and the lease renewals happen meanwhile: none refused under the shipped role.
    assert_nothing_refused(&ccm).await;
    let leases: Api<Lease> = Api::namespaced(cp.client().unwrap(), "kube-system");
    let lease = leases.get("cloud-controller-manager").await.unwrap();
    assert!(
        lease.spec.unwrap().holder_identity.is_some(),
        "the leader holds the default Lease"
    );
}

#[tokio::test]
async fn two_replicas_one_leads_and_the_standby_takes_over() {
    let (cp, mut args, _dir) = set_up().await;
    let lease_name = unique_name("lease");
    args.extend(quick_leader_election(&lease_name));
    let mut a = CcmProcess::builder(BIN)
        .args(&args)
        .env("HOSTNAME", "replica-a")
        .spawn();
    let leases: Api<Lease> = Api::namespaced(cp.client().unwrap(), "kube-system");
    wait_leader(&leases, &lease_name, "replica-a", &a, WAIT).await;
    // The standby serves its endpoints, so its cloud-call counters can be read.
    let b_port = free_port();
    let b = CcmProcess::builder(BIN)
        .args(serving_on(b_port, &args))
        .env("HOSTNAME", "replica-b")
        .spawn();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, metrics) = http_get(b_port, "/metrics").await;
    assert_eq!(status, 200, "{}", b.log());
    assert!(
        !metrics.contains("ccm_cloud_requests_total{"),
        "the standby made cloud calls before it led:\n{metrics}"
    );
    assert_eq!(
        http_get(b_port, "/readyz").await.0,
        200,
        "a standby is ready"
    );
    assert!(
        lease_holder(&leases, &lease_name)
            .await
            .starts_with("replica-a_"),
        "the standby does not steal the Lease"
    );
    assert!(
        !b.log().contains("starting controller"),
        "the standby runs no controller:\n{}",
        b.log()
    );

    // Kill the leader without a chance to release: the standby takes over within the lease.
    a.signal(Signal::Kill);
    a.wait_exit(WAIT).await;
    // Within the lease duration (3 s) plus slack.
    let takeover = Duration::from_secs(3) + Duration::from_secs(5);
    wait_leader(&leases, &lease_name, "replica-b", &b, takeover).await;
    // The Lease is written before the new leader has initialised and started its
    // controllers: wait for them to start (asserting at once raced with it).
    wait_started(&b).await;

    // The new leader works.
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    let name = unique_name("handover");
    create_node(&nodes, &name).await;
    wait_initialized(&nodes, &name, &b).await;
    let (_, metrics) = http_get(b_port, "/metrics").await;
    assert!(
        metrics.contains("ccm_cloud_requests_total{provider=\"fake\",method=\"instance_metadata\""),
        "the new leader's cloud calls are counted:\n{metrics}"
    );
}

#[tokio::test]
async fn sigterm_releases_the_lease_and_exits_zero() {
    let (cp, mut args, _dir) = set_up().await;
    let lease_name = unique_name("lease");
    args.push(format!("--leader-elect-resource-name={lease_name}"));
    let mut ccm = CcmProcess::start(BIN, &args);
    let leases: Api<Lease> = Api::namespaced(cp.client().unwrap(), "kube-system");
    wait_started(&ccm).await;
    ccm.signal(Signal::Term);
    let status = ccm.wait_exit(WAIT).await;
    assert!(status.success(), "exit {status:?}:\n{}", ccm.log());
    let lease = leases.get(&lease_name).await.unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity,
        None,
        "released on shutdown"
    );
}

#[tokio::test]
async fn a_disabled_controller_does_not_run() {
    let (cp, mut args, _dir) = set_up().await;
    args.extend([
        "--leader-elect=false".to_owned(),
        "--controllers=*,-cloud-node".to_owned(),
        // A Go flag with no effect here: accepted, and logged once.
        "--profiling=false".to_owned(),
    ]);
    let ccm = CcmProcess::start(BIN, &args);
    wait_started(&ccm).await;
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    let name = unique_name("disabled");
    create_node(&nodes, &name).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let node = nodes.get(&name).await.unwrap();
    assert_eq!(node.spec.unwrap().provider_id, None, "cloud-node is off");
    let log = ccm.log();
    assert!(
        log.contains("controller disabled by --controllers")
            && log.contains("cloud-node-controller"),
        "{log}"
    );
    assert!(
        log.contains("starting controller") && log.contains("cloud-node-lifecycle-controller"),
        "{log}"
    );
    assert_eq!(
        log.matches("flag --profiling is accepted and ignored: no profiling endpoints are served")
            .count(),
        1,
        "{log}"
    );
}

/// Runs the binary with `args` to its end.
async fn run(args: &[&str]) -> Finished {
    CcmProcess::builder(BIN).args(args).run(WAIT).await
}

#[tokio::test]
async fn bad_flags_and_config_fail_fast_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad_config = cloud_config(
        dir.path(),
        "instances:\n- name: a\n  addresses: [{type: InternalIP, address: nope}]\n",
    );
    // The kubeconfig does not exist: a check that reaches it would report that instead.
    let missing = dir.path().join("missing.kubeconfig");
    let kubeconfig = format!("--kubeconfig={}", missing.display());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec![], "--cloud-provider: is required"),
        (
            vec!["--cloud-provider=aws".into()],
            "--cloud-provider: unknown cloud provider \"aws\"",
        ),
        (
            vec!["--cloud-provider=fake".into(), "--kube-api-burst=0".into()],
            "--kube-api-burst",
        ),
        (
            vec![
                "--cloud-provider=fake".into(),
                "--controllers=*,-routing".into(),
            ],
            "--controllers",
        ),
        (
            vec!["--cloud-provider=fake".into()],
            "--cluster-cidr: \"\": must be set when cloud routes are configured",
        ),
        (
            vec![
                "--cloud-provider=fake".into(),
                "--cluster-cidr=10.0.0.0/8,10.1.0.0/16".into(),
            ],
            "--cluster-cidr",
        ),
        (
            vec![
                "--cloud-provider=fake".into(),
                "--cluster-cidr=10.0.0.0/33".into(),
            ],
            "--cluster-cidr",
        ),
        (
            vec![
                "--cloud-provider=fake".into(),
                "--leader-elect-renew-deadline=20s".into(),
            ],
            "--leader-elect-lease-duration",
        ),
        (
            vec![
                "--cloud-provider=fake".into(),
                format!("--cloud-config={}", bad_config.display()),
            ],
            "field `instances[0].addresses[0].address`",
        ),
        (
            vec![
                "--cloud-provider=fake".into(),
                format!("--cloud-config={}", dir.path().join("nope.yaml").display()),
            ],
            "--cloud-config: cannot read cloud-config file",
        ),
    ];
    for (mut args, want) in cases {
        args.push(kubeconfig.clone());
        let out = CcmProcess::builder(BIN)
            .args(&args)
            .env("RUST_LOG", "off")
            .run(WAIT)
            .await;
        let stderr = out.log;
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{args:?}: one line, got:\n{stderr}"
        );
        assert!(
            stderr.starts_with("error: ") && stderr.contains(want),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("missing.kubeconfig"),
            "{args:?}: checked before the cluster: {stderr}"
        );
    }
    // A value clap cannot parse is a usage error (exit 2) naming the flag.
    let out = run(&["--node-monitor-period=5"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(out.log.contains("--node-monitor-period"));
    // So is a feature gate Go's command does not know, with Go's message.
    let out = run(&["--feature-gates=CloudControllerManagerWebhook=false,NoSuchGate=true"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", out.log);
    assert!(
        out.log.contains("--feature-gates")
            && out.log.contains("unrecognized feature gate: NoSuchGate"),
        "{}",
        out.log
    );
    // --version and --version=raw print the binary's version and exit 0, as Go's; an
    // explicit false runs (and fails here on the missing --cloud-provider).
    let out = run(&["--version"]).await;
    assert!(out.status.success());
    let version = out.stdout;
    assert!(
        version.starts_with(&format!(
            "fake-cloud-controller-manager v{}",
            env!("CARGO_PKG_VERSION")
        )),
        "{version}"
    );
    let out = run(&["--version=raw"]).await;
    assert!(out.status.success());
    assert!(out.stdout.starts_with("version.Info{"));
    let out = run(&["--version=False", "--leader-elect=maybe"]).await;
    assert_eq!(out.status.code(), Some(2), "ParseBool refuses maybe");
    // --help reads well and exits 0.
    let out = run(&["--help"]).await;
    assert!(out.status.success());
    let help = out.stdout;
    for flag in [
        "--cloud-provider",
        "--leader-elect-lease-duration",
        "--concurrent-service-syncs",
        "--cluster-cidr",
    ] {
        assert!(help.contains(flag), "{flag} in --help");
    }
}

#[tokio::test]
async fn endpoints_report_readiness_and_metrics() {
    let (cp, args, _dir) = set_up().await;
    let port = free_port();
    let lease_name = unique_name("lease");
    let mut args = serving_on(port, &args);
    args.push(format!("--leader-elect-resource-name={lease_name}"));
    let ccm = CcmProcess::start(BIN, &args);
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    let name = unique_name("metrics");
    create_node(&nodes, &name).await;
    wait_initialized(&nodes, &name, &ccm).await;

    let body = eventually("/readyz 200", WAIT, || async {
        match http_get(port, "/readyz").await {
            (200, body) => Ok(body),
            (status, body) => Err(format!("not ready: {status} {body}\n{}", ccm.log())),
        }
    })
    .await;
    assert_eq!(body.trim(), "ok");
    let (status, body) = http_get(port, "/readyz?verbose").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("[+]leader-election ok") && body.contains("[+]informers-synced ok"),
        "{body}"
    );
    assert_eq!(http_get(port, "/healthz").await.0, 200);

    let needles = [
        "ccm_cloud_requests_total{provider=\"fake\",method=\"instance_metadata\",result=\"success\"} 1".to_owned(),
        format!("leader_election_master_status{{name=\"{lease_name}\"}} 1"),
        "running_managed_controllers{name=\"cloud-node-controller\",manager=\"cloud-controller-manager\"} 1".to_owned(),
        "workqueue_adds_total{name=\"Nodes\"}".to_owned(),
        "workqueue_adds_total{name=\"service\"}".to_owned(),
        "node_controller_cloud_provider_taint_removal_delay_seconds_count 1".to_owned(),
        "node_controller_initial_node_sync_delay_seconds_count 1".to_owned(),
        "route_controller_route_sync_total".to_owned(),
        // the Node write, a protobuf update (the default `--kube-api-content-type`)
        "ccm_api_requests_total{verb=\"PUT\",resource=\"nodes\"}".to_owned(),
        "rest_client_requests_total{code=\"200\",host=\"127.0.0.1:".to_owned(),
    ];
    // The node controller observes the taint-removal delay once its write has returned,
    // which a watch of the Node can see first: every figure must be there, soon.
    let metrics = eventually("every figure in /metrics", WAIT, || async {
        let (status, metrics) = http_get(port, "/metrics").await;
        match needles
            .iter()
            .find(|n| status != 200 || !metrics.contains(n.as_str()))
        {
            None => Ok(metrics),
            Some(needle) => Err(format!(
                "{status}: {needle} missing from /metrics:\n{metrics}"
            )),
        }
    })
    .await;
    assert_eq!(http_get(port, "/nope").await.0, 404);

    // The fake cloud's own metrics, registered by its `initialize`: one LB on our one Node.
    assert!(metrics.contains("fake_cloud_load_balancers 0"), "{metrics}");
    let services: Api<Service> = Api::namespaced(cp.client().unwrap(), "default");
    let svc = ServiceBuilder::load_balancer(&unique_name("metrics-lb"))
        .port(80)
        .build();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let what = "the fake cloud's LB metrics to show one LB on one Node";
    let metrics = eventually(what, WAIT, || async {
        let (_, metrics) = http_get(port, "/metrics").await;
        if metrics.contains("fake_cloud_load_balancers 1")
            && metrics.contains("fake_cloud_load_balancer_hosts_min 1")
        {
            Ok(metrics)
        } else {
            Err(format!("{metrics}\n{}", ccm.log()))
        }
    })
    .await;
    assert!(
        metrics.contains("fake_cloud_duplicate_route_creates_total 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_huge_annotation_retried_never_makes_a_long_log_line() {
    let (cp, args, _dir) = set_up().await;
    let ccm = CcmProcess::start(BIN, args);

    // 250 KB of a provided node IP that is no IP (annotations may hold 256 KiB in all):
    // quoted whole, it made 500 KB warnings, written again on every retry.
    let name = unique_name("huge");
    let mut node = tainted_node(&name);
    node.metadata.annotations = Some(
        [(
            ccm_core::well_known::ANNOTATION_PROVIDED_NODE_IP.to_owned(),
            "1".repeat(250_000),
        )]
        .into(),
    );
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    nodes.create(&PostParams::default(), &node).await.unwrap();

    // Retried with backoff: wait for a few attempts.
    eventually("three failed attempts in the log", WAIT, || async {
        let log = ccm.log();
        let attempts = log.matches("provided node ip for node").count();
        if attempts >= 3 {
            Ok(())
        } else {
            Err(format!(
                "{attempts} so far; log:\n{}",
                &log[..log.len().min(4000)]
            ))
        }
    })
    .await;
    let log = ccm.log();
    let longest = log.lines().map(str::len).max().unwrap_or_default();
    assert!(
        longest < 8 * 1024,
        "the longest log line has {longest} bytes"
    );
    let line = log
        .lines()
        .find(|l| l.contains("provided node ip for node"))
        .unwrap();
    assert!(line.contains("more bytes)"), "{line}");
}
