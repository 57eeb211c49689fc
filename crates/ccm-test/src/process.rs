//! A controller manager (or any binary under test) as a process: started with its
//! arguments and environment, its standard error in a log file the test reads, signalled,
//! waited for, and killed when the test drops it.
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
/// killed (`SIGKILL`) and waited for on drop. Its standard input and output are
/// `/dev/null`.
///
/// Start one with [`CcmProcess::builder`] (or [`CcmProcess::start`]).
#[derive(Debug)]
pub struct CcmProcess {
    name: String,
    child: Child,
    log: PathBuf,
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

    /// What the process wrote to its standard error so far ("" before it wrote anything).
    pub fn log(&self) -> String {
        read_log(&self.log)
    }

    /// The file its standard error goes to.
    pub fn log_path(&self) -> &Path {
        &self.log
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
        self.child
            .try_wait()
            .unwrap_or_else(|e| panic!("waiting for {}: {e}", self.name))
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
            let exited = child
                .try_wait()
                .unwrap_or_else(|e| panic!("waiting for {name}: {e}"));
            std::future::ready(exited.ok_or_else(|| format!("running; log:\n{}", read_log(log))))
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

    /// Starts the process.
    ///
    /// # Panics
    ///
    /// When the log file cannot be created or the program cannot be started: a test that
    /// cannot start what it tests cannot go on.
    pub fn spawn(mut self) -> CcmProcess {
        let name = self.name;
        let (log, dir) = match self.log {
            Some(log) => (log, None),
            None => {
                let dir = tempfile::tempdir()
                    .unwrap_or_else(|e| panic!("a folder for the log of {name}: {e}"));
                (dir.path().join(format!("{name}.log")), Some(dir))
            }
        };
        let file = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let child = self
            .command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        CcmProcess {
            name,
            child,
            log,
            _dir: dir,
        }
    }
}

/// The log at `path` so far.
fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
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
