#!/usr/bin/env bash
# What a provider crate that only implements the traits and unit-tests them with the mocks
# pays for ccm-core: its normal dependencies and a cold `cargo test --no-run`.
#
#   bench/provider-build/run.sh [REV...]   # default: the working tree
#
# Each REV (a git revision, or "." for the working tree) is measured with a scratch
# provider crate (bench/provider-build/provider) in a fresh target dir. Before the layered
# split (84e8605) the provider names `ccm-core` with feature `mock`; after it,
# `ccm-core` with `default-features = false, features = ["mock"]`. Prints one line per
# REV: dependencies (normal, `cargo tree`), crates compiled, wall and CPU seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
trap 'cd /; git -C "$repo" worktree prune; rm -rf "$work"' EXIT
revs=("$@")
[[ ${#revs[@]} -gt 0 ]] || revs=(.)

printf '%-10s %6s %8s %8s %8s\n' rev deps crates wall_s cpu_s
for rev in "${revs[@]}"; do
  if [[ "$rev" == . ]]; then
    src="$repo"
  else
    src="$work/src-$rev"
    git -C "$repo" worktree add --detach -q "$src" "$rev"
  fi
  crate="$work/provider-$rev"
  cp -r "$here/provider" "$crate"
  if [[ -d "$src/crates/ccm-provider" ]]; then
    dep="ccm-core = { path = \"$src/crates/ccm-core\", default-features = false, features = [\"mock\"] }"
  else
    dep="ccm-core = { path = \"$src/crates/ccm-core\", features = [\"mock\"] }"
  fi
  sed -i "s|^# CCM_CORE$|$dep|" "$crate/Cargo.toml"
  # The workspace's lock file, so both build the same dependency versions.
  cp "$src/Cargo.lock" "$crate/Cargo.lock"
  (
    cd "$crate"
    deps=$(cargo tree -e normal --prefix none 2>/dev/null | sed 's/ (\*)$//' | sort -u | wc -l)
    export CARGO_TARGET_DIR="$work/target-$rev"
    start=$(date +%s.%N)
    /usr/bin/time -f '%U %S' -o "$work/time-$rev" cargo test --no-run --quiet 2>"$work/log-$rev" || { cat "$work/log-$rev" >&2; exit 1; }
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    cpu=$(awk '{print $1+$2}' "$work/time-$rev")
    crates=$(grep -c '^' <(ls "$CARGO_TARGET_DIR"/debug/.fingerprint) || true)
    printf '%-10s %6s %8s %8.0f %8.0f\n' "${rev:0:10}" "$deps" "$crates" "$wall" "$cpu"
  )
done
