//! A tiny `sh` supervisor that owns the server processes of one control plane.
//!
//! The test process talks to it through a pipe on its standard input:
//! `start NAME` runs the command whose arguments are in `DIR/NAME.args`
//! (one per line); `stop NAME` stops that server (SIGTERM, then SIGKILL after
//! a grace period) and waits for it, so it can be started again. When the pipe reaches end of input, because the
//! [`ControlPlane`](crate::ControlPlane) was dropped *or because the test
//! process died in any way* (panic, `exit`, abort, SIGKILL: the kernel closes
//! the pipe), the supervisor stops the servers (newest first; SIGTERM, then
//! SIGKILL after a grace period), waits for them, runs `DIR/cleanup.sh` if there is one,
//! and removes `DIR`. This needs
//! no unsafe code, no signal handler and no `atexit` in the test process, and
//! it also cleans up after the process-wide shared instance, which as a
//! `static` is never dropped.
//!
//! The supervisor runs in its own process group, so a Ctrl-C in a terminal
//! reaches only the test process (whose exit then closes the pipe).

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// The supervisor script. `$1` is the control-plane folder.
const SCRIPT: &str = r#"
set -u
dir=$1
names=
stop_one() {
    name=$1
    sub=$(cat "$dir/$name.sub" 2>/dev/null) || return
    # The pid file is written right after the server is started.
    while [ ! -s "$dir/$name.pid" ] && kill -0 "$sub" 2>/dev/null; do sleep 0.05; done
    pid=$(cat "$dir/$name.pid" 2>/dev/null) || return
    kill -TERM "$pid" 2>/dev/null
    i=0
    while kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1))
        # SIGKILL after 5 s (100 x 0.05 s).
        if [ "$i" -eq 100 ]; then kill -KILL "$pid" 2>/dev/null; fi
        sleep 0.05
    done
    # The server's subshell writes NAME.exit, then ends.
    wait "$sub" 2>/dev/null
}
stop() {
    for name in $names; do stop_one "$name"; done
    wait
    # What the processes cannot clean up themselves (a cluster's cgroups), if anything.
    if [ -f "$dir/cleanup.sh" ]; then sh "$dir/cleanup.sh" "$dir" >/dev/null 2>&1; fi
    # A namespace's mounts go with its last process, which the kernel may still be
    # reaping: try again after a moment.
    rm -rf "$dir" 2>/dev/null || { sleep 1; rm -rf "$dir"; }
}
trap 'stop; exit 0' HUP INT TERM
while IFS= read -r line; do
    case $line in
    "start "*)
        name=${line#start }
        set --
        while IFS= read -r arg; do set -- "$@" "$arg"; done <"$dir/$name.args"
        (
            "$@" </dev/null >>"$dir/$name.log" 2>&1 &
            echo $! >"$dir/$name.pid.tmp" && mv "$dir/$name.pid.tmp" "$dir/$name.pid"
            wait $!
            echo $? >"$dir/$name.exit"
        ) &
        echo $! >"$dir/$name.sub"
        case " $names " in
        *" $name "*) ;;
        *) names="$name $names" ;;
        esac
        ;;
    "stop "*)
        stop_one "${line#stop }"
        ;;
    esac
done
stop
"#;

/// How long [`Supervisor::stop`] waits before giving up on the supervisor.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The supervisor of one control plane's servers.
#[derive(Debug)]
pub(crate) struct Supervisor {
    dir: PathBuf,
    child: Child,
    stdin: Option<ChildStdin>,
}

/// What became of a started server.
pub(crate) enum ServerState {
    /// Still running (as far as the supervisor has told us).
    Running,
    /// Exited with this status text (exit code, or 128+signal).
    Exited(String),
}

impl Supervisor {
    /// Starts a supervisor for `dir`, which it removes when it stops.
    pub(crate) fn spawn(dir: &Path) -> Result<Self, Error> {
        let log = std::fs::File::create(dir.join("supervisor.log"))
            .map_err(|e| Error::io("creating supervisor.log", e))?;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(SCRIPT)
            .arg("ccm-test-supervisor")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|e| Error::io("starting the supervisor (`sh`)", e))?;
        let stdin = child.stdin.take();
        Ok(Self {
            dir: dir.to_owned(),
            child,
            stdin,
        })
    }

    /// Starts a server: `program args...`, logging to `DIR/name.log`.
    pub(crate) fn start(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
    ) -> Result<(), Error> {
        let mut lines = String::new();
        let program = program
            .to_str()
            .ok_or_else(|| Error::InvalidArgument(format!("{} is not UTF-8", program.display())))?;
        for arg in std::iter::once(program).chain(args.iter().map(String::as_str)) {
            if arg.contains('\n') {
                return Err(Error::InvalidArgument(format!(
                    "argument {arg:?} contains a newline"
                )));
            }
            lines.push_str(arg);
            lines.push('\n');
        }
        std::fs::write(self.dir.join(format!("{name}.args")), lines)
            .map_err(|e| Error::io(format!("writing {name}.args"), e))?;
        self.restart(name)
    }

    /// Starts the server `name` again with the arguments it was first started with.
    pub(crate) fn restart(&mut self, name: &str) -> Result<(), Error> {
        self.send(&format!("start {name}\n"), name)
    }

    /// Asks the supervisor to stop the server `name` (SIGTERM, SIGKILL after 5 s). It is
    /// stopped once [`state`](Self::state) says it exited.
    pub(crate) fn stop_server(&mut self, name: &str) -> Result<(), Error> {
        self.send(&format!("stop {name}\n"), name)
    }

    /// Forgets how the server `name` ended, before it is started again.
    pub(crate) fn forget_exit(&self, name: &str) -> Result<(), Error> {
        for file in [format!("{name}.exit"), format!("{name}.pid")] {
            match std::fs::remove_file(self.dir.join(&file)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("removing {file}"), e)),
            }
        }
        Ok(())
    }

    fn send(&mut self, command: &str, name: &str) -> Result<(), Error> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Error::InvalidArgument("the supervisor is stopped".into()))?;
        stdin
            .write_all(command.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| Error::io(format!("asking the supervisor about {name}"), e))
    }

    /// Whether the server `name` is still running.
    pub(crate) fn state(&mut self, name: &str) -> ServerState {
        if let Ok(status) = std::fs::read_to_string(self.dir.join(format!("{name}.exit"))) {
            return ServerState::Exited(status.trim().to_owned());
        }
        if let Ok(Some(status)) = self.child.try_wait() {
            return ServerState::Exited(format!("its supervisor exited ({status})"));
        }
        ServerState::Running
    }

    /// The process id of the server `name`, once known.
    pub(crate) fn pid(&self, name: &str) -> Option<u32> {
        std::fs::read_to_string(self.dir.join(format!("{name}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Stops every server, removes the folder and waits for all of it.
    pub(crate) fn stop(&mut self) {
        // Closing the pipe is the stop signal.
        drop(self.stdin.take());
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    tracing::warn!(dir = %self.dir.display(), "the control-plane supervisor did not stop in time; killing it");
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
            }
        }
        // Normally the supervisor removed it; make sure.
        if self.dir.exists() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop();
    }
}
