//! Fenced leadership with two `fake-cloud-controller-manager` processes: the leader is
//! paused (SIGSTOP) in the middle of its work until the other has taken the Lease over, then
//! resumed (SIGCONT). Between waking up and exiting it must change nothing: no cloud
//! mutation, no API write other than its own failed attempt to renew the Lease.
//!
//! The two are counted by things the fence does not control: the API server's audit log
//! (each replica is a user of its own) and the debug line the instrumented provider writes as
//! each cloud call starts, below the fence. Without the fence the resumed leader writes the
//! status of the load balancers it was creating (and starts more), so this test fails.

mod common;

use std::path::Path;
use std::time::Duration;

use ccm_test::audit::read_audit_log;
use ccm_test::fixtures::{ServiceBuilder, ingress_of};
use ccm_test::process::{CcmProcess, Signal};
use ccm_test::{ControlPlane, eventually, unique_name};
use common::{BIN, WAIT, base_args, cloud_config, quick_leader_election, wait_leader};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
/// The cloud calls that change something; reads may pass a closed fence.
const MUTATIONS: [&str; 5] = [
    "\"ensure_load_balancer\"",
    "\"update_load_balancer\"",
    "\"ensure_load_balancer_deleted\"",
    "\"create_route\"",
    "\"delete_route\"",
];
/// The audit log's verbs that write.
const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// One replica: `HOSTNAME=hostname`, its log `hostname.log` in `dir`.
fn replica(args: &[String], hostname: &str, dir: &Path) -> CcmProcess {
    CcmProcess::builder(BIN)
        .args(args)
        .env("HOSTNAME", hostname)
        // The instrumented provider's "calling the cloud" lines are at debug level.
        .env(
            "RUST_LOG",
            "info,ccm_runtime::instrumented=debug,ccm_runtime::client=debug",
        )
        .name(hostname)
        .log_file(dir.join(format!("{hostname}.log")))
        .spawn()
}

/// How many of the Services have an ingress.
async fn with_ingress(services: &Api<Service>, names: &[String]) -> usize {
    let mut n = 0;
    for name in names {
        let service = services.get(name).await.unwrap();
        n += usize::from(!ingress_of(&service).is_empty());
    }
    n
}

/// The write requests of `user` the API server received at or after `since`, as
/// `(verb, resource, response code)`.
fn writes_of(audit_log: &Path, user: &str, since: Timestamp) -> Vec<(String, String, i64)> {
    read_audit_log(audit_log)
        .unwrap()
        .into_iter()
        .filter(|event| event.user == user && WRITES.contains(&event.verb.as_str()))
        .filter(|event| event.received.is_some_and(|t| t >= since))
        .map(|event| {
            let resource = event.resource_path();
            (event.verb, resource, event.code)
        })
        .collect()
}

/// When a line of the replica's log was logged (its leading timestamp).
fn logged_at(line: &str) -> Option<Timestamp> {
    line.split_whitespace().next()?.parse().ok()
}

/// The API writes (audit verb, resource) the replica's log says it sent in the second
/// before `stopped_at` ("sending an API write past the fence", at debug level).
fn sent_before(log: &str, stopped_at: Timestamp) -> Vec<(String, String)> {
    let since = stopped_at - k8s_openapi::jiff::SignedDuration::from_secs(1);
    log.lines()
        .filter(|l| l.contains("sending an API write past the fence"))
        .filter(|l| logged_at(l).is_some_and(|t| t >= since && t <= stopped_at))
        .filter_map(|l| {
            let field = |name: &str| {
                let rest = &l[l.find(&format!("{name}="))? + name.len() + 1..];
                Some(rest.split_whitespace().next()?.trim_matches('"').to_owned())
            };
            let verb = match field("verb")?.as_str() {
                "POST" => "create",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => return None,
            };
            Some((verb.to_owned(), resource_of(&field("path")?)))
        })
        .collect()
}

/// `services/status` of `/api/v1/namespaces/default/services/x/status`, as the audit log's
/// resource and subresource.
fn resource_of(path: &str) -> String {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => &[][..],
    };
    let rest = match rest {
        ["namespaces", _, rest @ ..] if !rest.is_empty() => rest,
        other => other,
    };
    match rest {
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
        [resource, ..] => (*resource).to_owned(),
        [] => String::new(),
    }
}

#[tokio::test]
async fn a_leader_paused_past_its_lease_changes_nothing_when_it_wakes_up() {
    let dir = tempfile::tempdir().unwrap();
    let cp = common::control_plane(ControlPlane::builder().audit_policy(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
         rules:\n- level: Metadata\n  verbs: [create, update, patch, delete, deletecollection]\n",
    ))
    .await;

    // Every cloud call takes 300 ms, so the leader is always in the middle of one.
    let config = cloud_config(dir.path(), "nodesAreInstances: true\nlatencyMs: 300\n");
    let lease = unique_name("lease");
    let args = |user: &str| {
        let kubeconfig = cp.kubeconfig_for_user(user, &["system:masters"]).unwrap();
        let mut args = base_args(&kubeconfig, &config);
        args.push("--concurrent-service-syncs=2".to_owned());
        args.extend(quick_leader_election(&lease));
        args
    };
    let (user_a, user_b) = (unique_name("ccm-a"), unique_name("ccm-b"));
    let mut a = replica(&args(&user_a), "replica-a", dir.path());
    let leases: Api<Lease> = Api::namespaced(cp.client().unwrap(), "kube-system");
    wait_leader(&leases, &lease, "replica-a", &a, WAIT).await;
    let b = replica(&args(&user_b), "replica-b", dir.path());

    // Work for the leader: ten load balancers, two at a time, 300 ms a call.
    let services: Api<Service> = Api::namespaced(cp.client().unwrap(), "default");
    let mut names = Vec::new();
    for _ in 0..10 {
        let name = unique_name("fenced-lb");
        let service = ServiceBuilder::load_balancer(&name).port(80).build();
        services
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
        names.push(name);
    }
    eventually("replica-a to be at work", WAIT, || async {
        match with_ingress(&services, &names).await {
            0 => Err(a.log()),
            n => Ok(n),
        }
    })
    .await;

    // Paused mid-call until replica-b leads, and a second more.
    a.signal(Signal::Stop);
    let (paused, stopped_at) = (tokio::time::Instant::now(), Timestamp::now());
    wait_leader(&leases, &lease, "replica-b", &b, WAIT).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (resumed_at, log_before) = (Timestamp::now(), a.log().len());
    println!(
        "replica-b took over; resuming replica-a after {:.1?} paused",
        paused.elapsed()
    );
    a.signal(Signal::Cont);
    let status = a.wait_exit(WAIT).await;
    assert_eq!(status.code(), Some(1), "lost leadership:\n{}", a.log());

    let awake = a.log()[log_before..].to_owned();
    // By the time each line was logged: a line logged just before the pause may reach the
    // test's reader of the replica's output only after it (seen in a cold CI run).
    let cloud_mutations: Vec<&str> = awake
        .lines()
        .filter(|l| l.contains("calling the cloud") && MUTATIONS.iter().any(|m| l.contains(m)))
        .filter(|l| logged_at(l).is_none_or(|logged| logged >= stopped_at))
        .collect();
    let refused = awake.lines().filter(|l| l.contains("refused")).count();
    // The audit log is written as requests complete; replica-a is gone, so it is complete
    // once replica-b's next request shows up.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = writes_of(cp.audit_log_path().unwrap(), &user_a, resumed_at);
    println!(
        "replica-a after waking: {refused} refused calls, {} cloud mutations, API writes {writes:?}",
        cloud_mutations.len()
    );
    assert!(
        cloud_mutations.is_empty(),
        "cloud mutations after waking up: {cloud_mutations:#?}\n{awake}"
    );
    // A write sent just before the pause (past the fence while it was open) may reach the
    // API server only after the replica wakes: not a write after waking.
    let mut in_flight = sent_before(&a.log(), stopped_at);
    let not_lease: Vec<_> = writes
        .iter()
        .filter(|(_, r, _)| r != "leases")
        .filter(|(verb, resource, _)| {
            let sent = in_flight
                .iter()
                .position(|w| w == &(verb.clone(), resource.clone()));
            sent.map(|i| in_flight.remove(i)).is_none()
        })
        .collect();
    assert!(
        not_lease.is_empty(),
        "API writes after waking up: {not_lease:?}\n{awake}"
    );
    assert!(
        writes.iter().all(|(_, _, code)| *code == 409),
        "its Lease renewal must fail: {writes:?}"
    );
    assert!(
        refused > 0,
        "the fence was tested: replica-a woke up with work to do\n{awake}"
    );

    // The new leader finishes the job.
    eventually("replica-b to finish the load balancers", WAIT, || async {
        match with_ingress(&services, &names).await {
            10 => Ok(()),
            n => Err(format!("{n} of 10; replica-b:\n{}", b.log())),
        }
    })
    .await;
}
