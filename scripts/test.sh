#!/usr/bin/env bash
# The one test command: formatting, lints, rustdoc, then every test — unit tests, mock
# tests, the tests against a real kube-apiserver + etcd and those in a real cluster
# (control-plane and node binaries built from their Go modules on first use, then reused).
# It does its own set-up first (scripts/lib/prereqs.sh: the Debian packages as root,
# rustup's components and the arm64 target), and ends with a table of each step's wall time.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh --quick         # the inner loop: checks, unit, mock and doc tests; no Go
#   scripts/test.sh -p ccm-core     # extra arguments go to `cargo test` (and after `--`, to
#                                   # the test binaries)
#   scripts/test.sh --also NAME=COMMAND ...   # more commands to run among the tests, once
#                                   # everything is built (.ci/run: the clusters, e2e)
#
# Where the time goes: the Go builds run in a lane of their own from the start
# (scripts/lib/go-tools.sh), beside the Rust builds; the test binaries then run side by
# side, the longest first, with the version and packaging builds as more jobs among them
# (scripts/lib/run-tests.py): most test time is waiting on API servers and kubelets.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
source scripts/lib/steps.sh

quick=false
also=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=true; shift ;;
    --also) also+=(--job "${2:?--also needs NAME=COMMAND}"); shift 2 ;;
    --also=*) also+=(--job "${1#--also=}"); shift ;;
    *) break ;;
  esac
done

export CCM_CACHE_DIR="${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}"
mkdir -p "$CCM_CACHE_DIR"
finish() {
  stop_lanes
  # .ci/run prints one table over its own steps too.
  [ -n "${CCM_STEPS_OUTER:-}" ] || steps_table
}
trap finish EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# (Steps run as `run_step NAME COMMAND`, where errexit does not reach into a function: each
# function below chains its commands with && or returns on failure.)
if $quick; then
  run_step "prerequisites" ensure_prereqs --quick
else
  run_step "prerequisites" ensure_prereqs
  start_lane go scripts/lib/go-tools.sh
fi

clippy() { cargo clippy --workspace --all-targets --all-features --locked -- -D warnings; }
rustdoc() { RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --workspace --no-deps --all-features --locked; }
public_api() { scripts/public-api.py ccm_core --check && scripts/public-api.py ccm_provider --check; }
control_plane() { # kube-apiserver, etcd, kubectl and the cluster tier's node binaries
  KUBEBUILDER_ASSETS="$(tools/control-plane/build.sh)" || return
  export KUBEBUILDER_ASSETS
  echo "using $KUBEBUILDER_ASSETS" >&2
}

run_step "cargo fmt --check" cargo fmt --all -- --check
run_step "cargo clippy -D warnings" clippy
run_step "cargo doc -D warnings" rustdoc
run_step "public API (docs/public-api)" public_api
run_step "provider docs (provider-docs.py)" scripts/provider-docs.py --check

runner=(scripts/lib/run-tests.py --durations "$CCM_CACHE_DIR/test-durations.json")
if $quick; then
  # Unit and mock tests (each crate's lib, bins and examples) and the doc tests.
  run_step "cargo test (unit, mock, doc)" "${runner[@]}" --with-doc --workspace --all-features --locked --lib --bins --examples "$@"
  exit 0
fi

run_step "build tests (cargo test --no-run)" cargo test --workspace --all-features --locked --no-run "$@"
# Every binary of the workspace is built now (the integration tests run them), unless
# arguments chose packages; the scripts run among the tests then use these rather than
# build other feature sets over them.
[ $# -gt 0 ] || export CCM_BINARIES_BUILT=1
# Debug, static, linux/amd64 + linux/arm64, arm64 run under qemu; the image tests run these
# archives; release images are built by `scripts/images.sh`.
run_step "container images (images.sh --debug)" scripts/images.sh --debug
export CCM_IMAGES_BUILT=1

run_step "wait for the Go builds" wait_lane go
# releases/ and examples/*/deploy/ rendered from charts/cloud-controller-manager.
run_step "release manifests" scripts/release-manifests.sh --check
run_step "Helm chart (helm-check.sh)" scripts/helm-check.sh
run_step "control-plane binaries" control_plane

# Every test binary and the doc tests, side by side; with them, as more jobs, the
# publishable crates at k8s-openapi's earliest and latest (k8s-versions.sh), every
# publishable crate packaged with an author's crate built on the packages (package.sh), the
# checks whose Go builds no test needs (at a lower priority than the tests: on a fresh
# machine they compile for minutes), and the commands given with --also.
checks=(
  # promtool check/test rules, metric names vs docs/metrics.md.
  --background-job "alerting rules (alerts.sh)=scripts/alerts.sh"
  # The flags and feature gates of Go's cloud-controller-manager vs the committed lists.
  --background-job "Go CCM flags (go-ccm-flags)=tools/go-ccm-flags/check.sh"
)
run_step "cargo test (+ k8s-versions.sh, package.sh, checks${also:+, --also})" "${runner[@]}" \
  --job "k8s-versions.sh=scripts/k8s-versions.sh" --job "package.sh=scripts/package.sh" \
  "${checks[@]}" "${also[@]}" --workspace --all-features --locked "$@"
