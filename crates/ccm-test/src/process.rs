//! A controller manager (or any binary under test) as a process: started with its
//! arguments and environment, its standard error in a log file the test reads (its standard
//! output too, when asked), signalled, waited for, and killed when the test drops it. A
//! command that runs to its end (`--help`, a bad flag) is [`CcmProcessBuilder::run`].
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use ccm_test::process::{CcmProcess, Signal};
//!
//! # async fn demo(kubeconfig: &std::path::Path) {
//! let mut ccm = CcmProcess::builder("target/debug/fake-cloud-controller-manager")
//!     .arg("--cloud-provider=fake")
//!     .arg(format!("--kubeconfig={}", kubeconfig.display()))
//!     .env("HOSTNAME", "replica-a")
//!     .spawn();
//! ccm.wait_log("starting controller", Duration::from_secs(30)).await;
//! ccm.signal(Signal::Term);
//! let status = ccm.wait_exit(Duration::from_secs(30)).await;
//! assert!(status.success(), "{}", ccm.log());
//! # }
//! ```

use std::ffi::OsStr;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::wait::{Outcome, eventually};

/// A signal for [`CcmProcess::signal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signal {
    /// `SIGTERM`: shut down gracefully.
    Term,
    /// `SIGINT`: what Ctrl-C sends.
    Int,
    /// `SIGKILL`: die at once, without a chance to clean up.
    Kill,
    /// `SIGSTOP`: freeze until [`Signal::Cont`].
    Stop,
    /// `SIGCONT`: resume after [`Signal::Stop`].
    Cont,
}

impl Signal {
    /// The signal's name without `SIG`, as `kill -NAME` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Term => "TERM",
            Self::Int => "INT",
            Self::Kill => "KILL",
            Self::Stop => "STOP",
            Self::Cont => "CONT",
        }
    }
}

/// A running process under test, its standard error in a log file ([`log`](Self::log));
/// killed (`SIGKILL`) and waited for on drop. Its standard input is `/dev/null`, and so is
/// its standard output unless [`CcmProcessBuilder::capture_stdout`] keeps it
/// ([`stdout`](Self::stdout)).
///
/// Start one with [`CcmProcess::builder`] (or [`CcmProcess::start`]).
#[derive(Debug)]
pub struct CcmProcess {
    name: String,
    child: Child,
    log: PathBuf,
    /// The file its standard output goes to, when it is kept.
    stdout: Option<PathBuf>,
    /// The folder of the log, when the process has one of its own.
    _dir: Option<tempfile::TempDir>,
}

/// How to start a [`CcmProcess`]; see [`CcmProcess::builder`].
#[derive(Debug)]
#[must_use]
pub struct CcmProcessBuilder {
    command: Command,
    name: String,
    log: Option<PathBuf>,
    capture_stdout: bool,
}

/// How a process that ran to its end ended, and what it wrote: see
/// [`CcmProcessBuilder::run`]. The counterpart of [`std::process::Output`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// What it wrote to its standard output.
    pub stdout: String,
    /// What it wrote to its standard error (its log).
    pub log: String,
}

impl CcmProcess {
    /// A process of `program` (e.g. `env!("CARGO_BIN_EXE_<name>")`) with no arguments yet,
    /// `RUST_LOG=info` and otherwise the test's environment, its log in a temporary folder
    /// of its own. Its name (in messages) is the program's file name.
    pub fn builder(program: impl AsRef<Path>) -> CcmProcessBuilder {
        let program = program.as_ref();
        let name = program.file_name().map_or_else(
            || program.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut command = Command::new(program);
        command.env("RUST_LOG", "info");
        CcmProcessBuilder {
            command,
            name,
            log: None,
            capture_stdout: false,
        }
    }

    /// Starts `program args` as [`builder`](Self::builder) describes.
    ///
    /// # Panics
    ///
    /// As [`CcmProcessBuilder::spawn`].
    pub fn start<I, S>(program: impl AsRef<Path>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::builder(program).args(args).spawn()
    }

    /// The name the process goes by in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process ID.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The CPU time (user + system seconds) it has used so far ([`cpu_seconds`]).
    ///
    /// # Errors
    ///
    /// When `/proc` cannot be read (the process was already waited for).
    pub fn cpu_seconds(&self) -> std::io::Result<f64> {
        cpu_seconds(self.id())
    }

    /// Its peak resident memory so far (`VmHWM`), in MiB ([`status_mib`]).
    ///
    /// # Errors
    ///
    /// As [`cpu_seconds`](Self::cpu_seconds).
    pub fn peak_rss_mib(&self) -> std::io::Result<f64> {
        status_mib(self.id(), "VmHWM")
    }

    /// What the process wrote to its standard error so far ("" before it wrote anything).
    pub fn log(&self) -> String {
        read_log(&self.log)
    }

    /// The file its standard error goes to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of its log: for a message about a long-running process.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// What the process wrote to its standard output so far ("" before it wrote anything).
    ///
    /// # Panics
    ///
    /// When its standard output is not kept ([`CcmProcessBuilder::capture_stdout`]).
    pub fn stdout(&self) -> String {
        read_log(self.stdout_path())
    }

    /// The file its standard output goes to.
    fn stdout_path(&self) -> &Path {
        self.stdout.as_deref().unwrap_or_else(|| {
            panic!(
                "the standard output of {} is not kept: start it with capture_stdout()",
                self.name
            )
        })
    }

    /// Sends `signal` to the process (with `kill`).
    ///
    /// # Panics
    ///
    /// When `kill` cannot be run or fails (the process was already waited for).
    pub fn signal(&self, signal: Signal) {
        let pid = self.id().to_string();
        let status = Command::new("kill")
            .arg(format!("-{}", signal.name()))
            .arg(&pid)
            .stdin(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(
            status.success(),
            "kill -{} {pid} ({}): {status}",
            signal.name(),
            self.name
        );
    }

    /// The process's exit status, if it has exited.
    ///
    /// # Panics
    ///
    /// When the status cannot be read (a bug).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        exit_status(&mut self.child, &self.name)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.try_wait().is_none()
    }

    /// Waits until the process exits, for up to `timeout`, and returns how it ended.
    ///
    /// # Panics
    ///
    /// When it is still running after `timeout`, quoting its log (see [`eventually`]).
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let what = format!("{} to exit", self.name);
        let (child, name, log) = (&mut self.child, &self.name, &self.log);
        eventually(&what, timeout, || {
            let exited = exit_status(child, name);
            std::future::ready(exited.ok_or_else(|| format!("running; log:\n{}", read_log(log))))
        })
        .await
    }

    /// Waits until the process has written a whole line (ended by a newline) to its standard
    /// output that starts with `prefix`, for up to `timeout`, and returns the rest of the
    /// first such line: an address or a path the process announces (`listening on …`).
    ///
    /// # Panics
    ///
    /// When its standard output is not kept ([`CcmProcessBuilder::capture_stdout`]); when
    /// the process exits without writing the line (at once) or has not written it after
    /// `timeout`, quoting its standard output and its log.
    pub async fn wait_stdout_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let path = self.stdout_path().to_owned();
        let what = format!("{} to write a line starting with {prefix:?}", self.name);
        let (child, name, log) = (&mut self.child, &self.name, &self.log);
        eventually(&what, timeout, || {
            // Whether it had exited before its output is read: then the output is complete.
            let exited = exit_status(child, name);
            let stdout = read_log(&path);
            let line = stdout
                .split_inclusive('\n')
                .filter_map(|line| line.strip_suffix('\n'))
                .find_map(|line| line.strip_prefix(prefix));
            let seen = || format!("its output:\n{stdout}\nits log:\n{}", read_log(log));
            std::future::ready(match (line, exited) {
                (Some(rest), _) => Ok(rest.to_owned()),
                (None, Some(status)) => panic!("{what}, but it exited ({status}); {}", seen()),
                (None, None) => Err(seen()),
            })
        })
        .await
    }

    /// Waits until the log contains `text`, for up to `timeout`.
    ///
    /// # Panics
    ///
    /// When it does not by then, quoting the log (see [`eventually`]).
    pub async fn wait_log(&self, text: &str, timeout: Duration) {
        eventually(&format!("the log to say {text:?}"), timeout, || {
            let log = self.log();
            std::future::ready(if log.contains(text) { Ok(()) } else { Err(log) })
        })
        .await;
    }

    /// [`eventually`], with the process's log added to what the check last saw: a test
    /// that waits for the process to do something fails with what the process said.
    pub async fn eventually<O, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: F,
    ) -> O::Output
    where
        O: Outcome,
        F: FnMut() -> Fut,
        Fut: Future<Output = O>,
    {
        eventually(what, timeout, || {
            let outcome = check();
            async move {
                outcome.await.into_result().map_err(|seen| {
                    let seen = seen.map(|s| format!("{s}\n")).unwrap_or_default();
                    format!("{seen}{}'s log:\n{}", self.name, self.log())
                })
            }
        })
        .await
    }
}

/// The CPU time (user + system seconds) process `pid` has used so far, from
/// `/proc/<pid>/stat`: what a benchmark reads of a process it did not start as a
/// [`CcmProcess`] (an API server, etcd).
///
/// # Errors
///
/// When the file cannot be read (no such process).
pub fn cpu_seconds(pid: u32) -> std::io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the `(comm)`, which may hold spaces: state is field 3; utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((field(11) + field(12)) / rustix::param::clock_ticks_per_second() as f64)
}

/// A `kB` line of `/proc/<pid>/status` (`key` is e.g. `VmRSS` or `VmHWM`), in MiB.
///
/// # Errors
///
/// When the file cannot be read (no such process) or has no such line.
pub fn status_mib(pid: u32, key: &str) -> std::io::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("no {key} line in /proc/{pid}/status"),
            )
        })?;
    Ok(kib / 1024.0)
}

impl Drop for CcmProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl CcmProcessBuilder {
    /// Adds an argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.command.arg(arg);
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    /// Sets an environment variable (`RUST_LOG` too, in place of `info`).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    /// Removes an environment variable the process would inherit from the test.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.command.env_remove(key);
        self
    }

    /// The name the process goes by in messages (a replica's, say).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Writes the log to `path` (created, or truncated) rather than into a temporary folder
    /// of the process's own: where the test keeps its other files.
    pub fn log_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.log = Some(path.into());
        self
    }

    /// Keeps what the process writes to its standard output, in a file beside its log
    /// (the log's name with the extension `stdout`), for [`CcmProcess::stdout`] and
    /// [`CcmProcess::wait_stdout_line`]; otherwise it goes to `/dev/null`.
    pub fn capture_stdout(mut self) -> Self {
        self.capture_stdout = true;
        self
    }

    /// Starts the process.
    ///
    /// # Panics
    ///
    /// When the log file cannot be created or the program cannot be started: a test that
    /// cannot start what it tests cannot go on.
    pub fn spawn(self) -> CcmProcess {
        self.try_spawn().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts the process, or says why it cannot (the log file cannot be created, the
    /// program cannot be started), naming the file or the program: for a tool that reports
    /// the failure rather than panicking.
    ///
    /// # Errors
    ///
    /// The I/O error, its message saying what was being done.
    pub fn try_spawn(mut self) -> std::io::Result<CcmProcess> {
        let name = self.name;
        let (log, dir) = match self.log {
            Some(log) => (log, None),
            None => {
                let dir = tempfile::tempdir()
                    .map_err(context(format!("a folder for the log of {name}")))?;
                (dir.path().join(format!("{name}.log")), Some(dir))
            }
        };
        let create = |path: &Path| {
            std::fs::File::create(path).map_err(context(format!("creating {}", path.display())))
        };
        let stdout = self.capture_stdout.then(|| log.with_extension("stdout"));
        let stdout_to = match &stdout {
            Some(path) => Stdio::from(create(path)?),
            None => Stdio::null(),
        };
        let child = self
            .command
            .stdin(Stdio::null())
            .stdout(stdout_to)
            .stderr(create(&log)?)
            .spawn()
            .map_err(context(format!("cannot start {name}")))?;
        Ok(CcmProcess {
            name,
            child,
            log,
            stdout,
            _dir: dir,
        })
    }

    /// Starts the process with its standard output kept, and waits up to `timeout` for it
    /// to exit: for a command that runs to its end (`--version`, a bad flag). The
    /// counterpart of [`Command::output`].
    ///
    /// # Panics
    ///
    /// As [`spawn`](Self::spawn), and when it is still running after `timeout` (see
    /// [`CcmProcess::wait_exit`]).
    pub async fn run(self, timeout: Duration) -> Finished {
        let mut process = self.capture_stdout().spawn();
        let status = process.wait_exit(timeout).await;
        Finished {
            status,
            stdout: process.stdout(),
            log: process.log(),
        }
    }
}

/// The exit status of `child` (`name` in messages), if it has exited.
///
/// # Panics
///
/// When the status cannot be read (a bug).
fn exit_status(child: &mut Child, name: &str) -> Option<ExitStatus> {
    child
        .try_wait()
        .unwrap_or_else(|e| panic!("waiting for {name}: {e}"))
}

/// The log at `path` so far.
fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// An I/O error the same as `e` but for its message, which says first what was being done.
fn context(what: String) -> impl FnOnce(std::io::Error) -> std::io::Error {
    move |e| std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(20);

    fn sh(script: &str) -> CcmProcessBuilder {
        CcmProcess::builder("sh").args(["-c", script])
    }

    #[tokio::test]
    async fn its_standard_error_is_the_log_and_its_status_is_waited_for() {
        let mut process = sh("echo \"$RUST_LOG $GREETING\" >&2; echo out; exit 3")
            .env("GREETING", "hello")
            .spawn();
        let status = process.wait_exit(WAIT).await;
        assert_eq!(status.code(), Some(3));
        assert_eq!(process.log(), "info hello\n");
        assert_eq!(process.name(), "sh");
        assert!(process.log_path().ends_with("sh.log"));
    }

    #[tokio::test]
    async fn a_signal_reaches_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("trap.log");
        let mut process = sh("trap 'echo terminated >&2; exit 0' TERM; echo ready >&2; \
                              while true; do sleep 0.05; done")
        .name("trap")
        .log_file(&log)
        .spawn();
        assert_eq!(process.log_path(), log);
        process.wait_log("ready", WAIT).await;
        assert!(process.is_running());
        process.signal(Signal::Term);
        assert!(process.wait_exit(WAIT).await.success());
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "ready\nterminated\n"
        );
    }

    #[tokio::test]
    async fn its_standard_output_is_kept_when_asked_and_a_line_awaited() {
        let mut process = sh(
            "echo starting >&2; printf 'listening on 127.0.0.1:8080\\nmore'; \
                              sleep 600",
        )
        .capture_stdout()
        .spawn();
        let address = process.wait_stdout_line("listening on ", WAIT).await;
        assert_eq!(address, "127.0.0.1:8080");
        assert_eq!(process.stdout(), "listening on 127.0.0.1:8080\nmore");
        assert!(process.log_path().with_extension("stdout").is_file());
        assert_eq!(process.log_tail(1), "starting");
    }

    #[tokio::test]
    async fn a_line_awaited_from_a_process_that_exits_without_it_fails_at_once() {
        let mut process = sh("echo nothing to say; echo why >&2")
            .capture_stdout()
            .spawn();
        let waited = tokio::spawn(async move {
            process
                .wait_stdout_line("listening on ", Duration::from_secs(600))
                .await
        })
        .await
        .expect_err("it should fail");
        let message = *waited.into_panic().downcast::<String>().unwrap();
        assert!(
            message.starts_with(
                "sh to write a line starting with \"listening on \", but it exited (exit status: 0)"
            ) && message.ends_with("its output:\nnothing to say\n\nits log:\nwhy\n"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_command_runs_to_its_end() {
        let finished = sh("echo out; echo err >&2; exit 2").run(WAIT).await;
        assert_eq!(finished.status.code(), Some(2));
        assert_eq!(finished.stdout, "out\n");
        assert_eq!(finished.log, "err\n");
    }

    #[test]
    fn a_program_that_cannot_start_is_an_error_that_names_it() {
        let err = CcmProcess::builder("/nonexistent/ccm")
            .try_spawn()
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert!(err.to_string().starts_with("cannot start ccm: "), "{err}");
    }

    #[tokio::test]
    async fn dropping_it_kills_it() {
        let process = sh("sleep 600").spawn();
        let pid = process.id();
        drop(process);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[tokio::test]
    async fn a_wait_that_times_out_quotes_the_log() {
        let process = sh("echo something happened >&2; sleep 600")
            .name("stuck")
            .spawn();
        process.wait_log("something", WAIT).await;
        let waited = tokio::spawn(async move {
            process
                .eventually("the impossible", Duration::from_secs(1), || async { false })
                .await;
        })
        .await
        .expect_err("it should time out");
        let message = *waited.into_panic().downcast::<String>().unwrap();
        assert_eq!(
            message,
            "timed out after 1s waiting for: the impossible\n\
             last seen: stuck's log:\nsomething happened\n"
        );
    }
}
