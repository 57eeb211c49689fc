#!/usr/bin/env python3
"""Runs the workspace's test binaries side by side, as `cargo test` would run them one by one.

Most of the test command's time is waiting: on kube-apiservers starting, kubelets
registering, Pods pulling, a 90-second coexistence window. `cargo test` runs one test
binary at a time, so two cores sit idle while a cluster test sleeps. This builds the test
binaries with `cargo test --no-run`, then runs up to --jobs of them at once, the longest
first (each binary's time from the last run is kept in --durations), and the doc tests as
one more job. Each binary runs as cargo runs it (in its package's folder, with cargo's
CARGO_* variables), and its whole output is printed when it ends, so the `test result:`
lines are those of `cargo test`. Every binary runs even when one fails; the exit status is
non-zero if any failed.

    run-tests.py [--jobs N] [--durations FILE] [--no-doc | --with-doc] [--job NAME=COMMAND]...
                 [--background-job NAME=COMMAND]... [CARGO_TEST_ARGS...] [-- TEST_BINARY_ARGS...]

The doc tests run as `cargo test` runs them: unless test targets are selected (--lib, --test
NAME, ...); --with-doc adds them anyway, --no-doc leaves them out.
--job adds a command (run with bash) as one more job, e.g. a build that can use the cores
while the cluster tests wait; --background-job, one at a lower priority than the tests (a
build only a check needs); --jobs defaults to $CCM_TEST_JOBS or twice the cores.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

# What a job not timed before is taken to last: a --job (a build) among the longest; a test
# binary as the seed file in this folder says (committed figures of a run), else 30 s.
JOB_SECONDS = 600.0
BINARY_SECONDS = 30.0
SEED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test-durations.json")


def log(message):
    print(f"run-tests: {message}", file=sys.stderr, flush=True)


def build(cargo_args):
    """A job for each test executable `cargo test --no-run` builds.

    A job is a dict: `key` (its name in the durations file), `kind` (`binary`, `doc` or
    `extra`: a --job), `command`, `cwd`, `env` and, for a --background-job, `low`.
    """
    command = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics", *cargo_args]
    log(" ".join(command))
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.exit(result.returncode)
    jobs = []
    for line in result.stdout.splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message.get("profile", {}).get("test"):
            continue
        target = message["target"]
        manifest = message["manifest_path"]
        package = package_of(message["package_id"], manifest)
        kind = target["kind"][0]
        jobs.append({
            "key": f"{package['name']} {kind} {target['name']}",
            "kind": "binary",
            "command": [message["executable"]],
            "cwd": os.path.dirname(manifest),
            "env": {
                "CARGO_MANIFEST_DIR": os.path.dirname(manifest),
                "CARGO_MANIFEST_PATH": manifest,
                "CARGO_PKG_NAME": package["name"],
                "CARGO_PKG_VERSION": package["version"],
                "CARGO_CRATE_NAME": target["name"].replace("-", "_"),
            },
        })
    return jobs


def package_of(package_id, manifest):
    """Name and version from a package ID (`path+file:///…/name#0.1.0` or `…#name@0.1.0`)."""
    fragment = package_id.rsplit("#", 1)[-1]
    if "@" in fragment:
        name, version = fragment.split("@", 1)
    else:
        name, version = os.path.basename(os.path.dirname(manifest)), fragment
    return {"name": name, "version": version}


def record_step(name, seconds, status, cpu):
    """A row of the run's step table (scripts/lib/steps.sh), when the run keeps one."""
    path = os.environ.get("CCM_STEPS_FILE")
    if not path:
        return
    cache = "beside the tests" + ("" if status == 0 else f", FAILED (exit {status})")
    with open(path, "a") as f:
        f.write(f"{name}\t{round(seconds)}\t{cache}\t{round(cpu)}\n")


def lower_priority():
    """In a job's process, before it runs: nice 10 for its session.

    Each job is a session of its own (so that it is stopped whole), and under Linux's
    scheduler autogroups (one per session, on by default) nice ranks processes within their
    session only: the session's autogroup is set to nice 10 too.
    """
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("10")
    except OSError:
        pass
    os.nice(10)


class Runner:
    def __init__(self, jobs, slots, test_args):
        self.queue = jobs
        self.slots = slots
        self.test_args = test_args
        self.lock = threading.Lock()
        self.running = {}
        self.failed = []
        self.durations = {}
        self.done = 0
        self.stopping = False
        # The test binaries as one row of the step table: their span and CPU.
        self.binaries = {"count": 0, "cpu": 0.0, "first": None, "last": None, "failed": 0}

    def run_one(self, job):
        env = dict(os.environ, **job["env"])
        with tempfile.TemporaryFile(mode="w+") as out:
            start = time.monotonic()
            # The binaries' arguments go to the test binaries and the doc tests, not to a --job.
            args = [] if job["kind"] == "extra" else self.test_args
            process = subprocess.Popen(
                job["command"] + args, cwd=job["cwd"], env=env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=lower_priority if job.get("low") else None)
            with self.lock:
                self.running[job["key"]] = process
            # wait4: the exit status and the CPU time of the job and what it waited for.
            _, raw, usage = os.wait4(process.pid, 0)
            process.returncode = status = os.waitstatus_to_exitcode(raw)
            seconds = time.monotonic() - start
            cpu = usage.ru_utime + usage.ru_stime
            out.seek(0)
            output = out.read()
        with self.lock:
            del self.running[job["key"]]
            self.done += 1
            self.durations[job["key"]] = round(seconds, 1)
            verdict = "ok" if status == 0 else f"FAILED (exit {status})"
            if status != 0:
                self.failed.append(job["key"])
            if job["kind"] != "binary":
                record_step(f"  {job['key']} (beside the tests)", seconds, status, cpu)
            else:
                b = self.binaries
                b["count"] += 1
                b["cpu"] += cpu
                b["failed"] += status != 0
                b["first"] = start if b["first"] is None else min(b["first"], start)
                b["last"] = time.monotonic()
            sys.stdout.write(f"\n     Running {job['key']} ({' '.join(job['command'])})\n{output}")
            sys.stdout.flush()
            log(f"[{self.done}/{self.total}] {job['key']}: {verdict} in {seconds:.0f}s (CPU {cpu:.0f}s)")

    def worker(self):
        while True:
            with self.lock:
                if self.stopping or not self.queue:
                    return
                job = self.queue.pop(0)
            self.run_one(job)

    def stop(self, signum, _frame):
        with self.lock:
            self.stopping = True
            for process in self.running.values():
                try:
                    os.killpg(process.pid, signum)
                except ProcessLookupError:
                    pass

    def run(self):
        self.total = len(self.queue)
        threads = [threading.Thread(target=self.worker) for _ in range(self.slots)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


# cargo's target selection: the doc tests are their own selection (`--doc`), so these are
# left out of the doc-test job's arguments (with their values where they take one).
TARGET_FLAGS = {"--lib", "--bins", "--examples", "--tests", "--benches", "--all-targets"}
TARGET_OPTIONS = {"--bin", "--example", "--test", "--bench"}


def without_targets(cargo_args):
    kept, skip = [], False
    for arg in cargo_args:
        if skip:
            skip = False
        elif arg in TARGET_FLAGS or arg.split("=", 1)[0] in TARGET_OPTIONS:
            skip = arg in TARGET_OPTIONS
        else:
            kept.append(arg)
    return kept


def read_json(path):
    """The JSON object in `path`, or {} when there is no such file."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def usage(message):
    print(f"run-tests: {message}\n\n{__doc__.strip()}", file=sys.stderr)
    sys.exit(2)


def parse(argv):
    """The runner's own options first, then cargo's arguments, then `--` and the binaries'."""
    options = {
        "jobs": int(os.environ.get("CCM_TEST_JOBS", "0")) or 2 * (os.cpu_count() or 1),
        "durations": None,
        "doc": None,
        "extra": [],
    }
    rest = list(argv)
    while rest and rest[0] in ("--jobs", "--durations", "--no-doc", "--with-doc", "--job",
                               "--background-job"):
        option = rest.pop(0)
        if option in ("--no-doc", "--with-doc"):
            options["doc"] = option == "--with-doc"
            continue
        if not rest:
            usage(f"{option} needs a value")
        value = rest.pop(0)
        if option == "--jobs":
            if not value.isdigit() or int(value) < 1:
                usage(f"--jobs {value!r} is not a positive number")
            options["jobs"] = int(value)
        elif option == "--durations":
            options["durations"] = value
        else:
            name, sep, command = value.partition("=")
            if not sep or not name or not command:
                usage(f"{option} {value!r} is not NAME=COMMAND")
            options["extra"].append((name, command, option == "--background-job"))
    if "--" in rest:
        split = rest.index("--")
        return options, rest[:split], rest[split + 1:]
    return options, rest, []


def main():
    args, cargo_args, test_args = parse(sys.argv[1:])
    jobs = build(cargo_args)
    # As `cargo test`: the doc tests run unless targets are selected (or --with-doc).
    doc = args["doc"]
    doc_args = without_targets(cargo_args)
    if doc is None:
        doc = doc_args == cargo_args
    if doc:
        jobs.append({
            "key": "doc-tests",
            "kind": "doc",
            "command": ["cargo", "test", "--doc", *doc_args, "--"],
            "cwd": os.getcwd(),
            "env": {},
        })
    for name, command, low in args["extra"]:
        jobs.append({"key": name, "kind": "extra", "command": ["bash", "-c", command],
                     "cwd": os.getcwd(), "env": {}, "low": low})
    # The last run's times (kept, and updated at the end) over the committed seed.
    measured = read_json(args["durations"]) if args["durations"] else {}
    known = {**read_json(SEED), **measured}

    def estimate(job):
        default = JOB_SECONDS if job["kind"] == "extra" else BINARY_SECONDS
        return known.get(job["key"], default)

    jobs.sort(key=estimate, reverse=True)
    log(f"{len(jobs)} test jobs, {args['jobs']} at a time, the longest first")

    runner = Runner(jobs, args["jobs"], test_args)
    signal.signal(signal.SIGTERM, runner.stop)
    signal.signal(signal.SIGINT, runner.stop)
    start = time.monotonic()
    runner.run()

    b = runner.binaries
    if b["count"]:
        record_step(f"  {b['count']} test binaries, side by side", b["last"] - b["first"],
                    1 if b["failed"] else 0, b["cpu"])
    if args["durations"] and not runner.stopping:
        measured.update(runner.durations)
        os.makedirs(os.path.dirname(os.path.abspath(args["durations"])), exist_ok=True)
        with open(args["durations"], "w") as f:
            json.dump(measured, f, indent=1, sort_keys=True)
    slowest = sorted(runner.durations.items(), key=lambda kv: kv[1], reverse=True)[:8]
    log(f"{runner.done} test jobs in {time.monotonic() - start:.0f}s; the slowest: "
        + ", ".join(f"{key} {seconds:.0f}s" for key, seconds in slowest))
    if runner.stopping:
        sys.exit(130)
    if runner.failed:
        log("failed: " + ", ".join(runner.failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
