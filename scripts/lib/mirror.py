#!/usr/bin/env python3
"""Makes DEST a copy of the Git work tree SOURCE in which a file keeps its modification
time for as long as its content stays the same, so that cargo's build cache stays fresh for
it: `.ci/run` tests such a copy at a fixed path instead of the fresh clone it is run in.

Cargo decides whether a workspace crate must be rebuilt from its source files' modification
times, and a crate may embed its absolute location (`env!("CARGO_MANIFEST_DIR")`: ccm-test
finds its control-plane build so), which cargo does not rebuild for when the workspace
moves. In a fresh clone every file is new and the path may be new too, so every workspace
crate is rebuilt in every profile and feature set the run builds (clippy, rustdoc, the
tests, two image targets, two k8s-openapi versions, the packaged crates), whatever changed.
Testing at one path, where only changed files are rewritten, rebuilds what changed.

What is copied: the files Git lists in SOURCE (tracked, as they are in the work tree, and
untracked ones it does not ignore) and the whole `.git` folder. A file of DEST whose content
and executable bit are those of SOURCE is not touched; any other is written (its time: now).
What goes: every file of DEST that Git lists there (tracked or untracked, not ignored) and
SOURCE does not have, and any file of DEST's `.git` that SOURCE's lacks. Ignored files stay
(`target/images/`): they are the run's outputs, which it rebuilds.

Why that is safe: a file's time is when this script last wrote it, at the start of a run,
and it is not rewritten while its content stays; so every build of DEST made since was made
from that content, and a build of other content was made before that time, which makes it
stale for cargo. This holds for runs one at a time on one DEST (`.ci/run` holds a lock on
the cache), with nothing else writing in DEST or building in its target folder.

    mirror.py SOURCE DEST       # prints what it copied and removed

It then checks that Git sees the same work tree in both (`git status`), and fails if not.
"""

import filecmp
import os
import shutil
import stat
import subprocess
import sys


def listed(tree):
    """The files Git lists in `tree`: tracked (present in the work tree) and untracked
    ones it does not ignore, as relative paths."""
    out = subprocess.run(
        ["git", "-C", tree, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        stdout=subprocess.PIPE,
    ).stdout
    paths = {p.decode() for p in out.split(b"\0") if p}
    return {p for p in paths if os.path.lexists(os.path.join(tree, p))}


def status_of(tree):
    """`git status --porcelain` of `tree`: its changes against the index, and untracked
    files."""
    return subprocess.run(
        ["git", "--no-optional-locks", "-C", tree, "status", "--porcelain",
         "--untracked-files=all"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout


def walk(top):
    """Every file and symbolic link under `top`, as paths relative to it."""
    found = set()
    for folder, dirs, files in os.walk(top):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            found.add(os.path.relpath(os.path.join(folder, name), top))
    return found


def same(src, dst):
    """Whether `dst` is already what `src` is: the same link target, or a regular file with
    the same bytes and executable bit."""
    if os.path.islink(src) or os.path.islink(dst):
        return (
            os.path.islink(src)
            and os.path.islink(dst)
            and os.readlink(src) == os.readlink(dst)
        )
    try:
        s, d = os.stat(src), os.stat(dst)
    except FileNotFoundError:
        return False
    executable = stat.S_IXUSR
    return (
        stat.S_ISREG(d.st_mode)
        and s.st_size == d.st_size
        and (s.st_mode & executable) == (d.st_mode & executable)
        and filecmp.cmp(src, dst, shallow=False)
    )


def copy(src, dst):
    """Writes `dst` as `src` (a link as a link), with the present time."""
    if os.path.lexists(dst) or os.path.isdir(dst):
        if os.path.isdir(dst) and not os.path.islink(dst):
            shutil.rmtree(dst)
        else:
            os.unlink(dst)
    # A file where SOURCE has a folder goes first.
    parent = os.path.dirname(dst)
    while parent and not os.path.isdir(parent):
        if os.path.lexists(parent):
            os.unlink(parent)
            break
        parent = os.path.dirname(parent)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
    else:
        shutil.copyfile(src, dst)
        os.chmod(dst, stat.S_IMODE(os.stat(src).st_mode))


def sync(source, dest, paths, present):
    """Copies `paths` from `source` to `dest` where they differ; removes `present - paths`
    from `dest`. Returns (copied, removed)."""
    copied = 0
    for path in sorted(paths):
        src, dst = os.path.join(source, path), os.path.join(dest, path)
        if not same(src, dst):
            copy(src, dst)
            copied += 1
    removed = 0
    for path in sorted(present - paths):
        target = os.path.join(dest, path)
        if os.path.lexists(target) and not os.path.isdir(target):
            os.unlink(target)
            removed += 1
    return copied, removed


def prune_empty(top):
    """Removes the empty folders under `top` (a file removed may leave one)."""
    for folder, dirs, files in os.walk(top, topdown=False):
        if folder != top and not dirs and not files:
            try:
                os.rmdir(folder)
            except OSError:
                pass


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source, dest = (os.path.abspath(p) for p in sys.argv[1:])
    if not os.path.isdir(os.path.join(source, ".git")):
        sys.exit(f"mirror: {source} is not the top folder of a Git work tree")
    if dest == source or dest.startswith(source + os.sep):
        sys.exit(f"mirror: {dest} is inside {source}")
    os.makedirs(dest, exist_ok=True)
    files = listed(source)
    # The repository first, so that Git in DEST then lists DEST's files by SOURCE's index.
    git_src, git_dst = os.path.join(source, ".git"), os.path.join(dest, ".git")
    git_present = walk(git_dst) if os.path.isdir(git_dst) else set()
    git_copied, git_removed = sync(git_src, git_dst, walk(git_src), git_present)
    prune_empty(git_dst)
    copied, removed = sync(source, dest, files, listed(dest))
    prune_empty(dest)
    # The proof: Git sees the same work tree in both (what differs from the commit, and the
    # untracked files), comparing contents where the file times differ.
    status = [status_of(tree) for tree in (source, dest)]
    if status[0] != status[1]:
        sys.exit(
            f"mirror: {dest} differs from {source}: git status there says\n{status[1]}\n"
            f"and here\n{status[0]}"
        )
    print(
        f"mirror: {dest} is {source}: {copied} of {len(files)} files written, {removed} removed "
        f"(.git: {git_copied} written, {git_removed} removed); the others keep their times",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
