//! `fake-cloud-controller-manager` given inputs that used to hang it or blow up its memory:
//! a named pipe or a device as a file, deep nesting, a huge worker count, and SIGTERM in the
//! middle of startup. Each ends the process at once with a clear message. No cluster: every
//! case ends before one is needed, or against a listener that never answers.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ccm_test::eventually;
use ccm_test::process::{CcmProcess, Signal};

const BIN: &str = env!("CARGO_BIN_EXE_fake-cloud-controller-manager");

/// How long a process that should exit at once may take: a hang detector, generous for a
/// loaded machine. Before these fixes each case hung for good or for many minutes.
const EXIT: Duration = Duration::from_secs(20);

/// The controller manager with `args`, its log `ccm.log` in `dir`.
fn start(dir: &Path, args: &[String]) -> CcmProcess {
    CcmProcess::builder(BIN)
        .args(args)
        .env_remove("KUBECONFIG")
        // No `~/.kube/config` of the machine's user is ever read.
        .env("HOME", dir)
        .log_file(dir.join("ccm.log"))
        .spawn()
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

/// Runs the binary to its exit, which must be status 1 (an error); its last log line.
async fn error_line(args: &[String]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut ccm = start(dir.path(), args);
    let status = ccm.wait_exit(EXIT).await;
    let log = ccm.log();
    let last = log.lines().last().unwrap_or_default().to_owned();
    assert_eq!(status.code(), Some(1), "{args:?}: {last}");
    last
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
        let last = error_line(&args(&[format!("--cloud-config={}", path.display())])).await;
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
        let last = error_line(&args(&[format!("--kubeconfig={}", path.display())])).await;
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
    let last = error_line(&args(&[format!("--cloud-config={}", big.display())])).await;
    assert!(
        last.ends_with("big.yaml: is larger than 1 MiB, the limit for this file"),
        "{last}"
    );

    // 200 kB of nested brackets used to parse for minutes, deaf to SIGTERM.
    let nested = dir.path().join("nested.yaml");
    std::fs::write(&nested, format!("instances: {}", "[".repeat(200_000))).unwrap();
    let last = error_line(&args(&[format!("--cloud-config={}", nested.display())])).await;
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
    let last = error_line(&args(&["--concurrent-service-syncs=1000000000".to_owned()])).await;
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
async fn exits_cleanly(mut ccm: CcmProcess) -> String {
    ccm.signal(Signal::Term);
    let status = ccm.wait_exit(EXIT).await;
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
    let ccm = start(
        dir.path(),
        &args(&[
            format!("--cloud-config={}", config.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
        ]),
    );
    ccm.wait_log("building the cloud provider", EXIT).await;
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
    let ccm = start(
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
async fn sigterm_while_an_exec_plugin_hangs_ends_the_process_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_listener, kubeconfig) = silent_api_server(dir.path());
    // The kubeconfig's user becomes an exec plugin that never answers; it writes its PID,
    // for the test to end it (its controller manager will be gone).
    let pid_file = dir.path().join("plugin.pid");
    let script = dir.path().join("plugin.sh");
    let body = format!(
        "#!/bin/sh\necho $$ > '{}'\nexec sleep 600\n",
        pid_file.display()
    );
    std::fs::write(&script, body).unwrap();
    let user = format!(
        "user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
         command: /bin/sh\n      interactiveMode: Never\n      args: [\"{}\"]",
        script.display()
    );
    // Over HTTPS: over plain HTTP no credentials are used, so no plugin would run (as in
    // client-go).
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let text = text
        .replace("user: {}", &user)
        .replace("http://127.0.0.1", "https://127.0.0.1");
    std::fs::write(&kubeconfig, text).unwrap();
    let ccm = start(
        dir.path(),
        &args(&[format!("--kubeconfig={}", kubeconfig.display())]),
    );
    let pid = eventually("the plugin to start", EXIT, || {
        std::future::ready(
            std::fs::read_to_string(&pid_file)
                .map_err(|e| e.to_string())
                .and_then(|p| p.trim().parse::<u32>().map_err(|e| e.to_string())),
        )
    })
    .await;
    let log = exits_cleanly(ccm).await;
    let _ = Command::new("kill").arg(pid.to_string()).status();
    assert!(
        log.contains("shutting down before the Kubernetes client was configured"),
        "{log}"
    );
}

/// What a path may wrongly hold, made at `path`, and the end of the error the process must
/// give for it.
fn make_bad(path: &Path, kind: &str) -> &'static str {
    match kind {
        "fifo" => {
            let made = Command::new("mkfifo").arg(path).status().unwrap();
            assert!(made.success());
            "is a named pipe (FIFO), not a regular file"
        }
        "device" => {
            std::os::unix::fs::symlink("/dev/zero", path).unwrap();
            "is a character device, not a regular file"
        }
        "directory" => {
            std::fs::create_dir(path).unwrap();
            "is a directory, not a regular file"
        }
        "100 MB" => {
            // Sparse: the reader must stop after its limit, not read 100 MB.
            let file = std::fs::File::create(path).unwrap();
            file.set_len(100_000_000).unwrap();
            ", the limit for this file"
        }
        "missing" => "No such file or directory (os error 2)",
        _ => unreachable!("{kind}"),
    }
}

const BAD_KINDS: &[&str] = &["fifo", "device", "directory", "100 MB", "missing"];

/// The flags of Go's command that name a file or a directory (by their usage text), and our
/// own: derived, so that a flag added to either list is found here without a case.
fn path_flags() -> Vec<String> {
    let json: serde_json::Value = serde_json::from_str(include_str!(
        "../../../crates/ccm-runtime/tests/data/go-ccm-flags.json"
    ))
    .unwrap();
    // By its name (`…-file`, `…-dir`, `…kubeconfig`, `…-config`, `…-cert-key`) or by its
    // usage text (a file, files, a directory, a path).
    let names_a_file = |flag: &serde_json::Value| {
        let name = flag["name"].as_str().unwrap_or_default();
        let usage = flag["usage"].as_str().unwrap_or_default().to_lowercase();
        ["-file", "-dir", "kubeconfig", "-config", "-cert-key"]
            .iter()
            .any(|end| name.ends_with(end))
            || usage
                .split(|c: char| !c.is_alphanumeric())
                .any(|w| ["file", "files", "directory", "path", "paths"].contains(&w))
    };
    let mut flags: Vec<String> = json
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| matches!(f["type"].as_str(), Some("string" | "namedCertKey")))
        .filter(|f| names_a_file(f))
        .map(|f| f["name"].as_str().unwrap().to_owned())
        .collect();
    // Ours that Go has not take no path (`--insecure-serving`); none to add.
    flags.sort();
    flags
}

/// Files every case can use: a valid certificate and key (made by the binary itself, in a
/// `--cert-dir`), and the arguments that turn serving on without binding before the files
/// are read.
struct Valid {
    cert: PathBuf,
    key: PathBuf,
    serving: Vec<String>,
}

async fn valid_files(dir: &Path) -> Valid {
    let certs = dir.join("certs");
    let serving = vec![
        "--bind-address=127.0.0.1".to_owned(),
        // Never bound: every case fails while the files are read, before the server starts.
        "--secure-port=10258".to_owned(),
    ];
    let mut args = args(&[format!("--cert-dir={}", certs.display())]);
    args.retain(|a| a != "--secure-port=0");
    args.extend(serving.clone());
    // No kubeconfig: it stops there, after writing the pair.
    let last = error_line(&args).await;
    let valid = Valid {
        cert: certs.join("cloud-controller-manager.crt"),
        key: certs.join("cloud-controller-manager.key"),
        serving,
    };
    assert!(valid.cert.is_file() && valid.key.is_file(), "{last}");
    valid
}

/// A kubeconfig at `path` for a server that is never reached; `cluster` and `user` add
/// fields.
fn kubeconfig_naming(path: &Path, cluster: &str, user: &str) {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:1\"{cluster}}}\n\
             users:\n- name: u\n  user: {{{user}}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
             current-context: x\n"
        ),
    )
    .unwrap();
}

/// One run: `args` must end the process at once with status 1 and a last line that starts
/// with `error: `, names `origin` and `path`, and ends with `why`. The seconds it took.
async fn refused(args: &[String], origin: &str, path: &Path, why: &str) -> f64 {
    let started = std::time::Instant::now();
    let last = error_line(args).await;
    let took = started.elapsed().as_secs_f64();
    let start = format!("error: {origin}: cannot read ");
    assert!(
        last.starts_with(&start)
            && last.contains(&path.display().to_string())
            && last.ends_with(why),
        "{args:?}:\n  {last}\nshould start with {start:?}, name {} and end with {why:?}",
        path.display()
    );
    took
}

#[tokio::test]
async fn every_path_flag_refuses_what_is_not_a_small_regular_file_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let valid = valid_files(dir.path()).await;
    let serving = |extra: Vec<String>| {
        let mut args = args(&extra);
        args.retain(|a| a != "--secure-port=0");
        args.extend(valid.serving.clone());
        args
    };
    let mut slowest: (f64, String) = (0.0, String::new());
    let mut runs = 0;
    for flag in path_flags() {
        for (n, kind) in BAD_KINDS.iter().enumerate() {
            let case = dir.path().join(format!("{flag}-{n}"));
            std::fs::create_dir(&case).unwrap();
            let bad = case.join("bad");
            let why = make_bad(&bad, kind);
            let bad_arg = format!("--{flag}={}", bad.display());
            let (args, origin, path) = match flag.as_str() {
                "cloud-config" => (args(&[bad_arg]), "--cloud-config".to_owned(), bad.clone()),
                "kubeconfig" => (args(&[bad_arg]), "--kubeconfig".to_owned(), bad.clone()),
                "tls-cert-file" => (
                    serving(vec![
                        bad_arg,
                        format!("--tls-private-key-file={}", valid.key.display()),
                    ]),
                    "--tls-cert-file".to_owned(),
                    bad.clone(),
                ),
                "tls-private-key-file" => (
                    serving(vec![
                        format!("--tls-cert-file={}", valid.cert.display()),
                        bad_arg,
                    ]),
                    "--tls-private-key-file".to_owned(),
                    bad.clone(),
                ),
                "tls-sni-cert-key" => (
                    serving(vec![format!(
                        "--tls-sni-cert-key={},{}",
                        bad.display(),
                        valid.key.display()
                    )]),
                    "--tls-sni-cert-key".to_owned(),
                    bad.clone(),
                ),
                "cert-dir" => {
                    if *kind == "missing" {
                        continue; // a missing pair is generated: no error
                    }
                    // The pair in the directory is what is read.
                    let certs = case.join("certs");
                    std::fs::create_dir(&certs).unwrap();
                    let crt = certs.join("cloud-controller-manager.crt");
                    std::fs::rename(&bad, &crt)
                        .or_else(|_| {
                            // a symbolic link or FIFO renames fine; recreate if not
                            make_bad(&crt, kind);
                            Ok::<(), ()>(())
                        })
                        .unwrap();
                    std::fs::copy(&valid.key, certs.join("cloud-controller-manager.key")).unwrap();
                    (
                        serving(vec![format!("--cert-dir={}", certs.display())]),
                        "--cert-dir".to_owned(),
                        crt,
                    )
                }
                "client-ca-file"
                | "requestheader-client-ca-file"
                | "authentication-kubeconfig"
                | "authorization-kubeconfig" => {
                    (serving(vec![bad_arg]), format!("--{flag}"), bad.clone())
                }
                // Accepted and ignored (no webhooks are served, no leader migration): never
                // opened, whatever they name; the run goes on to its next error.
                _ if flag.starts_with("webhook-") || flag == "leader-migration-config" => {
                    let (status, log) = {
                        let bad_arg = if flag.ends_with("-cert-key") {
                            format!("{bad_arg},{}", bad.display())
                        } else {
                            bad_arg
                        };
                        let mut ccm = start(&case, &args(&[bad_arg]));
                        let status = ccm.wait_exit(EXIT).await;
                        (status, ccm.log())
                    };
                    assert_eq!(status.code(), Some(1), "{log}");
                    assert!(
                        log.contains(&format!("flag --{flag} is accepted and ignored")),
                        "{log}"
                    );
                    let last = log.lines().last().unwrap_or_default();
                    assert!(!last.contains(&flag), "{last}");
                    continue;
                }
                other => panic!(
                    "--{other} names a file or directory: add a case here (and make sure it is read through ccm_provider::file)"
                ),
            };
            let took = refused(&args, &origin, &path, why).await;
            runs += 1;
            if took > slowest.0 {
                slowest = (took, format!("--{flag} {kind}"));
            }
        }
    }
    eprintln!(
        "{runs} refusals; the slowest took {:.2} s ({})",
        slowest.0, slowest.1
    );
    assert!(runs >= 40, "{runs}");
}

#[tokio::test]
async fn every_file_a_kubeconfig_names_is_refused_with_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let valid = valid_files(dir.path()).await;
    let mut runs = 0;
    for flag in [
        "--kubeconfig",
        "--authentication-kubeconfig",
        "--authorization-kubeconfig",
    ] {
        for field in [
            "certificate-authority",
            "client-certificate",
            "client-key",
            "tokenFile",
        ] {
            for (n, kind) in BAD_KINDS.iter().enumerate() {
                let case = dir.path().join(format!("{flag}-{field}-{n}"));
                std::fs::create_dir(&case).unwrap();
                let bad = case.join("bad");
                let why = make_bad(&bad, kind);
                let (cluster, user, owner) = match field {
                    "certificate-authority" => (
                        format!(", certificate-authority: \"{}\"", bad.display()),
                        String::new(),
                        "cluster \"c\"",
                    ),
                    "client-key" => (
                        String::new(),
                        format!(
                            "client-certificate: \"{}\", client-key: \"{}\"",
                            valid.cert.display(),
                            bad.display()
                        ),
                        "user \"u\"",
                    ),
                    _ => (
                        String::new(),
                        format!("{field}: \"{}\"", bad.display()),
                        "user \"u\"",
                    ),
                };
                let kubeconfig = case.join("kubeconfig");
                kubeconfig_naming(&kubeconfig, &cluster, &user);
                let mut extra = vec![format!("{flag}={}", kubeconfig.display())];
                let mut args = args(&[]);
                if flag != "--kubeconfig" {
                    args.retain(|a| a != "--secure-port=0");
                    extra.extend(valid.serving.clone());
                }
                args.extend(extra);
                refused(&args, &format!("{flag}: {field} of {owner}"), &bad, why).await;
                runs += 1;
            }
        }
    }
    assert_eq!(runs, 3 * 4 * BAD_KINDS.len());
}
