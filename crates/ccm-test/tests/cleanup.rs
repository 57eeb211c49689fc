//! No stray processes, no leftover folders: after a drop, after a panic, and
//! after the test process exits or aborts with the shared (never dropped)
//! control plane still running. Also: a server that fails to start gives an
//! error quoting its log.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ccm_test::{Binaries, ControlPlane, Error};
use common::{process_alive, run_child, wait_nothing_left};

/// Set in the child process to the way it should end.
const CHILD_MODE: &str = "CCM_TEST_CLEANUP_CHILD";
/// The line the child prints once its control plane is up.
const REPORT: &str = "CCM-TEST-CHILD";
/// How long a child may take: to start a control plane, report it, and end.
const CHILD_WITHIN: Duration = Duration::from_secs(300);

/// What a running control plane leaves on the machine.
#[derive(Debug)]
struct Footprint {
    dir: PathBuf,
    pids: Vec<u32>,
    port: u16,
}

impl Footprint {
    fn of(cp: &ControlPlane) -> Self {
        let (etcd, apiserver) = cp.process_ids();
        let port = cp.server_url().rsplit(':').next().unwrap().parse().unwrap();
        Self {
            dir: cp.dir().to_owned(),
            pids: vec![etcd.expect("etcd pid"), apiserver.expect("apiserver pid")],
            port,
        }
    }

    fn line(&self) -> String {
        format!(
            "{REPORT} {} {} {} {}",
            self.port,
            self.pids[0],
            self.pids[1],
            self.dir.display()
        )
    }

    fn parse(line: &str) -> Option<Self> {
        // libtest may have printed `test child ... ` on the same line.
        let start = line.find(REPORT)? + REPORT.len();
        let mut words = line[start..].trim().splitn(4, ' ');
        let port = words.next()?.parse().ok()?;
        let pids = vec![words.next()?.parse().ok()?, words.next()?.parse().ok()?];
        let dir = PathBuf::from(words.next()?);
        Some(Self { dir, pids, port })
    }

    /// What is still there, if anything.
    fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        for pid in &self.pids {
            if process_alive(*pid) {
                left.push(format!("process {pid}"));
            }
        }
        if self.dir.exists() {
            left.push(format!("folder {}", self.dir.display()));
        }
        if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            left.push(format!("listener on port {}", self.port));
        }
        left
    }

    fn assert_running(&self) {
        for pid in &self.pids {
            assert!(process_alive(*pid), "process {pid} is not running");
        }
        assert!(self.dir.is_dir(), "{} is missing", self.dir.display());
    }

    async fn assert_gone_within(&self, timeout: Duration) {
        wait_nothing_left("the control plane's clean-up", timeout, || self.leftovers()).await;
    }
}

#[tokio::test]
async fn drop_stops_the_servers_and_removes_the_folder() {
    let cp = ControlPlane::start().await.unwrap();
    let footprint = Footprint::of(&cp);
    footprint.assert_running();
    assert!(cp.kubeconfig_path().is_file());
    assert!(cp.dir().join("kube-apiserver.log").is_file());
    cp.client().unwrap().apiserver_version().await.unwrap();

    let stopping = Instant::now();
    drop(cp);
    eprintln!("stopped in {:?}", stopping.elapsed());
    // Drop waits for the clean-up: nothing may be left right after it.
    assert_eq!(footprint.leftovers(), Vec::<String>::new());
}

/// Runs this test binary's `child` test in a new process with `mode`, and
/// returns what its control plane left behind plus the child's exit status.
async fn child_footprint(mode: &str) -> (Footprint, std::process::ExitStatus) {
    let child = run_child(CHILD_MODE, mode, CHILD_WITHIN).await;
    let footprint = child.stdout.lines().find_map(Footprint::parse);
    // The child's stderr (with its deliberate panic) is shown only on failure.
    let footprint = footprint.unwrap_or_else(|| {
        panic!(
            "the child ({mode}) never reported ({}); its stderr:\n{}",
            child.status, child.log
        )
    });
    (footprint, child.status)
}

#[tokio::test]
async fn a_panicking_test_leaves_nothing_behind() {
    let (footprint, status) = child_footprint("panic").await;
    assert_eq!(
        status.code(),
        Some(101),
        "the child test should have failed"
    );
    // The control plane was dropped while unwinding, before the exit.
    assert_eq!(footprint.leftovers(), Vec::<String>::new());
}

#[tokio::test]
async fn an_aborted_process_leaves_nothing_behind() {
    let (footprint, status) = child_footprint("abort").await;
    assert!(!status.success());
    // Nothing ran in the child after the abort: its supervisor cleans up.
    footprint.assert_gone_within(Duration::from_secs(30)).await;
}

#[tokio::test]
async fn an_exiting_process_with_the_shared_instance_leaves_nothing_behind() {
    let (footprint, status) = child_footprint("exit").await;
    assert!(status.success());
    footprint.assert_gone_within(Duration::from_secs(30)).await;
}

/// Not a test of its own: the body of the child processes above.
#[tokio::test]
#[ignore = "helper run in a child process by the clean-up tests"]
async fn child() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    let report = |cp: &ControlPlane| {
        let footprint = Footprint::of(cp);
        footprint.assert_running();
        println!("{}", footprint.line());
    };
    match mode.as_str() {
        "panic" => {
            let cp = ControlPlane::start().await.unwrap();
            report(&cp);
            panic!("deliberate panic with a running control plane");
        }
        "abort" => {
            report(ControlPlane::shared().await.unwrap());
            std::process::abort();
        }
        "exit" => {
            report(ControlPlane::shared().await.unwrap());
            std::process::exit(0);
        }
        other => panic!("unknown {CHILD_MODE}={other}"),
    }
}

fn fake_binary(dir: &Path, name: &str, script: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn a_server_that_exits_gives_an_error_with_its_log() {
    let bin = tempfile::tempdir().unwrap();
    let binaries = Binaries {
        etcd: fake_binary(
            bin.path(),
            "etcd",
            "echo 'etcd: cannot do the thing' >&2; exit 3",
        ),
        kube_apiserver: fake_binary(bin.path(), "kube-apiserver", "exit 1"),
        kubectl: None,
    };
    let err = ControlPlane::builder()
        .binaries(binaries)
        .start()
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(
            err,
            Error::Start {
                component: "etcd",
                ..
            }
        ),
        "{message}"
    );
    assert!(message.contains("exited (3)"), "{message}");
    assert!(message.contains("etcd: cannot do the thing"), "{message}");
}

#[tokio::test]
async fn a_server_that_never_gets_ready_times_out_and_is_stopped() {
    let bin = tempfile::tempdir().unwrap();
    let pid_file = bin.path().join("etcd.pid");
    let binaries = Binaries {
        // Records its pid, then hangs without listening.
        etcd: fake_binary(
            bin.path(),
            "etcd",
            &format!("echo $$ > '{}'; exec sleep 600", pid_file.display()),
        ),
        kube_apiserver: fake_binary(bin.path(), "kube-apiserver", "exit 1"),
        kubectl: None,
    };
    let err = ControlPlane::builder()
        .binaries(binaries)
        .start_timeout(Duration::from_secs(3))
        .start()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not ready in time"), "{err}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The failed start was cleaned up before the error was returned.
    assert!(
        !process_alive(pid),
        "the hanging etcd {pid} is still running"
    );
}
