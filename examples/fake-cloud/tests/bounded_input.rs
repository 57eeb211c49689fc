//! `fake-cloud-controller-manager` given inputs that used to hang it or blow up its memory:
//! a named pipe or a device as a file, deep nesting, a huge worker count, and SIGTERM in the
//! middle of startup. Each ends the process at once with a clear message. No cluster: every
//! case ends before one is needed, or against a listener that never answers.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use ccm_test::eventually;

const BIN: &str = env!("CARGO_BIN_EXE_fake-cloud-controller-manager");

/// How long a process that should exit at once may take: a hang detector, generous for a
/// loaded machine. Before these fixes each case hung for good or for many minutes.
const EXIT: Duration = Duration::from_secs(20);

/// A controller manager process; killed on drop. Its stderr goes to a file.
struct Ccm {
    child: Child,
    log: PathBuf,
}

impl Ccm {
    fn start(dir: &Path, args: &[String]) -> Self {
        let log = dir.join("ccm.log");
        let child = Command::new(BIN)
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_exit(&mut self) -> ExitStatus {
        let (child, log) = (&mut self.child, &self.log);
        eventually("the controller manager to exit", EXIT, || {
            let exited = child.try_wait().unwrap();
            let log = std::fs::read_to_string(log).unwrap_or_default();
            std::future::ready(exited.ok_or_else(|| format!("running; log:\n{log}")))
        })
        .await
    }

    async fn wait_log(&self, line: &str) {
        let log = &self.log;
        eventually(&format!("the log to say {line:?}"), EXIT, || {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            std::future::ready(if text.contains(line) {
                Ok(())
            } else {
                Err(text)
            })
        })
        .await;
    }

    fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Ccm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn args(extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "--cloud-provider=fake".to_owned(),
        "--cluster-cidr=10.244.0.0/16".to_owned(),
        "--secure-port=0".to_owned(),
    ];
    args.extend_from_slice(extra);
    args
}

fn fifo(dir: &Path) -> PathBuf {
    let path = dir.join("fifo");
    let made = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(made.success());
    path
}

/// Runs the binary to its exit; its status and its last log line.
async fn run_to_exit(args: &[String]) -> (ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut ccm = Ccm::start(dir.path(), args);
    let status = ccm.wait_exit().await;
    let log = ccm.log();
    let last = log.lines().last().unwrap_or_default().to_owned();
    (status, last)
}

#[tokio::test]
async fn a_named_pipe_or_a_device_as_cloud_config_is_an_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = fifo(dir.path());
    for (path, what) in [
        (fifo.as_path(), "a named pipe (FIFO)"),
        (Path::new("/dev/zero"), "a character device"),
        (dir.path(), "a directory"),
    ] {
        let (status, last) =
            run_to_exit(&args(&[format!("--cloud-config={}", path.display())])).await;
        assert_eq!(status.code(), Some(1), "{last}");
        assert_eq!(
            last,
            format!(
                "error: --cloud-config: cannot read cloud-config file {}: is {what}, not a regular file",
                path.display()
            )
        );
    }
}

#[tokio::test]
async fn a_named_pipe_or_a_device_as_kubeconfig_is_an_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = fifo(dir.path());
    for (path, why) in [
        (fifo.as_path(), "is a named pipe (FIFO), not a regular file"),
        (
            Path::new("/dev/zero"),
            "is a character device, not a regular file",
        ),
        (
            Path::new("/nonexistent/kubeconfig"),
            "No such file or directory (os error 2)",
        ),
    ] {
        let (status, last) =
            run_to_exit(&args(&[format!("--kubeconfig={}", path.display())])).await;
        assert_eq!(status.code(), Some(1), "{last}");
        assert_eq!(
            last,
            format!("error: --kubeconfig: cannot read {}: {why}", path.display())
        );
    }
}

#[tokio::test]
async fn an_oversized_or_deeply_nested_cloud_config_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, format!("# {}\n", "x".repeat(1024 * 1024))).unwrap();
    let (status, last) = run_to_exit(&args(&[format!("--cloud-config={}", big.display())])).await;
    assert_eq!(status.code(), Some(1), "{last}");
    assert!(
        last.ends_with("big.yaml: is larger than 1 MiB, the limit for this file"),
        "{last}"
    );

    // 200 kB of nested brackets used to parse for minutes, deaf to SIGTERM.
    let nested = dir.path().join("nested.yaml");
    std::fs::write(&nested, format!("instances: {}", "[".repeat(200_000))).unwrap();
    let (status, last) =
        run_to_exit(&args(&[format!("--cloud-config={}", nested.display())])).await;
    assert_eq!(status.code(), Some(1), "{last}");
    assert_eq!(
        last,
        format!(
            "error: could not init cloud provider \"fake\": invalid cloud-config file {}: nested deeper than 64 levels at line 1 column 76",
            nested.display()
        )
    );
}

#[tokio::test]
async fn a_worker_count_beyond_the_bound_is_a_flag_error() {
    let (status, last) =
        run_to_exit(&args(&["--concurrent-service-syncs=1000000000".to_owned()])).await;
    assert_eq!(status.code(), Some(1), "{last}");
    assert_eq!(
        last,
        "error: --concurrent-service-syncs: must be between 1 and 10000, got 1000000000"
    );
}

/// A kubeconfig for an API server at `server`; `cluster` adds fields to its cluster.
fn write_kubeconfig(dir: &Path, server: &str, cluster: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\"{cluster}}}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
             current-context: x\n"
        ),
    )
    .unwrap();
    path
}

/// An API server that accepts connections and never answers (the startup check would wait
/// its 10 s for it), and a kubeconfig for it.
fn silent_api_server(dir: &Path) -> (TcpListener, PathBuf) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = format!("http://{}", listener.local_addr().unwrap());
    let kubeconfig = write_kubeconfig(dir, &server, "");
    (listener, kubeconfig)
}

/// Waits for a clean exit after SIGTERM; the log.
async fn exits_cleanly(mut ccm: Ccm) -> String {
    ccm.sigterm();
    let status = ccm.wait_exit().await;
    let log = ccm.log();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("received SIGTERM"), "{log}");
    log
}

#[tokio::test]
async fn sigterm_while_the_provider_is_built_ends_the_process_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_listener, kubeconfig) = silent_api_server(dir.path());
    // A large valid cloud-config: 50,000 instances, close to the 1 MiB limit. Reading and
    // checking it takes a while (seconds in a debug build); SIGTERM comes meanwhile, or
    // at a later step if the machine is fast. Either way: exit 0, at once.
    let config = dir.path().join("large.yaml");
    let instances: String = (0..50_000)
        .map(|i| format!("- {{name: n{i:05}}}\n"))
        .collect();
    std::fs::write(&config, format!("instances:\n{instances}")).unwrap();
    assert!(std::fs::metadata(&config).unwrap().len() < 1024 * 1024);
    let ccm = Ccm::start(
        dir.path(),
        &args(&[
            format!("--cloud-config={}", config.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
        ]),
    );
    ccm.wait_log("building the cloud provider").await;
    let log = exits_cleanly(ccm).await;
    assert!(
        [
            "shutting down before the cloud provider was built",
            "shutting down before the Kubernetes client was configured",
            "shutting down while waiting for the API server",
        ]
        .iter()
        .any(|line| log.contains(line)),
        "{log}"
    );
}

#[tokio::test]
async fn sigterm_while_the_api_server_is_awaited_ends_the_process_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (listener, kubeconfig) = silent_api_server(dir.path());
    let ccm = Ccm::start(
        dir.path(),
        &args(&[format!("--kubeconfig={}", kubeconfig.display())]),
    );
    // The process has connected: it is waiting for an answer.
    listener.set_nonblocking(true).unwrap();
    let _connection = eventually("the controller manager to connect", EXIT, || {
        std::future::ready(listener.accept().map(|(c, _)| c).map_err(|e| e.to_string()))
    })
    .await;
    let log = exits_cleanly(ccm).await;
    assert!(
        log.contains("shutting down while waiting for the API server"),
        "{log}"
    );
}

#[tokio::test]
async fn sigterm_while_kube_reads_a_file_ends_the_process_at_once() {
    // The kubeconfig names a named pipe as its CA bundle, a file kube reads itself: the
    // read blocks for good, and the process still ends at once.
    let dir = tempfile::tempdir().unwrap();
    let ca = fifo(dir.path());
    let kubeconfig = write_kubeconfig(
        dir.path(),
        "https://127.0.0.1:1",
        &format!(", certificate-authority: \"{}\"", ca.display()),
    );
    let ccm = Ccm::start(
        dir.path(),
        &args(&[format!("--kubeconfig={}", kubeconfig.display())]),
    );
    ccm.wait_log("configuring the Kubernetes client").await;
    let log = exits_cleanly(ccm).await;
    assert!(
        log.contains("shutting down before the Kubernetes client was configured"),
        "{log}"
    );
}
