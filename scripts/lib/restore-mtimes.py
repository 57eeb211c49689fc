#!/usr/bin/env python3
"""Gives each file of a fresh clone the modification time it had in the last run, when its
content is the same, so that cargo's build cache outside the clone stays fresh for it.

Cargo decides whether a workspace crate must be rebuilt from its source files' modification
times: a file newer than the last build makes the crate stale. In a fresh clone every file
is new, so every workspace crate is rebuilt in every profile and feature set the run builds
(clippy, rustdoc, the tests, two image targets, two k8s-openapi versions, the packaged
crates), whatever changed. This keeps, in FILE, each tracked file's Git blob ID and the
modification time it had in the last run; a file whose blob ID is the same as then gets
that time back, and any other file gets the present time (and is recorded with it).

Why that is safe: a recorded time is the start of the run that first had that content, so
no build of that run was older, and it is only given back to the very same content. A
build of any other content of that file was made in an earlier run (the record is
rewritten at the start of each), so before that time, and cargo sees it as older than the
file: stale. This holds for runs one at a time on one cache, which `.ci/run` ensures with a
lock, and with nothing else building in that cache's target folder.

And only for a clone at the same path as the last run's: a crate may embed its absolute
location (`env!("CARGO_MANIFEST_DIR")`: ccm-test finds its control-plane build so), and
cargo does not rebuild a crate because the workspace moved. So the record names the path it
was made at, and a clone elsewhere gets nothing back (everything is rebuilt, as without this
script), and is recorded for the next run there.

    restore-mtimes.py FILE      # in the top folder of a Git work tree (.ci/run: the clone)

Files with changes not committed are left as they are and not recorded.
"""

import os
import subprocess
import sys
import time


def tracked():
    """(path, blob ID) of each tracked file whose content is the committed one."""
    listing = subprocess.run(
        ["git", "ls-files", "--stage", "-z"], check=True, stdout=subprocess.PIPE
    ).stdout
    changed = set(
        subprocess.run(
            ["git", "ls-files", "--modified", "--deleted", "-z"],
            check=True,
            stdout=subprocess.PIPE,
        ).stdout.split(b"\0")
    )
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        mode, blob, _stage = meta.split(b" ")
        # Regular files only (not symbolic links: utime would follow them; not submodules).
        if mode in (b"100644", b"100755") and path not in changed:
            yield path.decode(), blob.decode()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    record = sys.argv[1]
    here = os.getcwd()
    known = {}
    try:
        with open(record, encoding="utf-8") as f:
            header = f.readline().rstrip("\n")
            if header == f"# {here}":
                for line in f:
                    path, blob, ns = line.rstrip("\n").split("\t")
                    known[path] = (blob, int(ns))
            else:
                print(
                    f"restore-mtimes: the last run was at {header[2:]!r}, not here: nothing restored",
                    file=sys.stderr,
                )
    except FileNotFoundError:
        pass
    except ValueError:
        known = {}  # a damaged record only costs a rebuild

    now = time.time_ns()
    restored = 0
    rows = []
    for path, blob in tracked():
        before = known.get(path)
        if before is not None and before[0] == blob:
            ns = before[1]
            restored += 1
        else:
            # Not the clone's time: a run that started after the clone was made may have
            # built other content since.
            ns = now
        os.utime(path, ns=(ns, ns), follow_symlinks=False)
        rows.append(f"{path}\t{blob}\t{ns}\n")

    os.makedirs(os.path.dirname(os.path.abspath(record)), exist_ok=True)
    with open(record + ".tmp", "w", encoding="utf-8") as f:
        f.write(f"# {here}\n")
        f.writelines(rows)
    os.replace(record + ".tmp", record)
    print(
        f"restore-mtimes: {restored} of {len(rows)} files have the times of the last run (the same content)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
