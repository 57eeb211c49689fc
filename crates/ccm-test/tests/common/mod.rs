//! Shared by the clean-up tests of the control plane (`cleanup.rs`) and the cluster tests
//! (`cluster.rs`, `cluster_dual_stack.rs`).
#![allow(dead_code, reason = "each test binary uses a part of it")]

use std::time::Duration;

use ccm_test::eventually;
use ccm_test::process::{CcmProcess, Finished};

/// Whether `pid` is a live (not zombie) process. Linux `/proc`.
pub(crate) fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// Runs this test binary's ignored test `child` in a process of its own, with the
/// environment variable `key` set to `value` (how it should end), and waits up to `timeout`
/// for it to end. Its panic message, if any, is in the log.
pub(crate) async fn run_child(key: &str, value: &str, timeout: Duration) -> Finished {
    CcmProcess::builder(std::env::current_exe().unwrap())
        .args([
            "child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(key, value)
        .env("RUST_BACKTRACE", "0")
        .run(timeout)
        .await
}

/// Waits up to `timeout` until `leftovers` finds nothing left of what `what` names.
pub(crate) async fn wait_nothing_left(
    what: &str,
    timeout: Duration,
    leftovers: impl Fn() -> Vec<String>,
) {
    eventually(what, timeout, || async {
        let left = leftovers();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still there: {left:?}"))
        }
    })
    .await;
}

/// Removes the `uninitialized` taint from the Node `name`, as a cloud-controller-manager
/// would once it has initialised it.
pub(crate) async fn remove_uninitialized_taint(
    nodes: &kube::Api<k8s_openapi::api::core::v1::Node>,
    name: &str,
) {
    let object = nodes.get(name).await.unwrap();
    let taints: Vec<_> = object
        .spec
        .unwrap()
        .taints
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != ccm_test::cluster::UNINITIALIZED_TAINT)
        .collect();
    let patch = serde_json::json!({"spec": {"taints": taints}});
    let params = kube::api::PatchParams::default();
    nodes
        .patch(name, &params, &kube::api::Patch::Merge(patch))
        .await
        .unwrap();
}
