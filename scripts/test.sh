#!/usr/bin/env bash
# The one test command: formatting, lints, rustdoc, then every test — unit tests, mock
# tests, the tests against a real kube-apiserver + etcd and those in a real cluster
# (control-plane and node binaries built from their Go modules on first use, then reused).
# It does its own set-up first (scripts/lib/prereqs.sh: Debian packages as root, rustup's
# components and the arm64 target), and ends with a table of each step's wall time.
#
#   scripts/test.sh              # everything
#   scripts/test.sh -p ccm-core  # extra arguments go to `cargo test`
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
source scripts/lib/steps.sh

ensure_prereqs
# The table is printed however the run ends (.ci/run prints one over its own steps too).
[ -n "${CCM_STEPS_OUTER:-}" ] || trap steps_table EXIT

clippy() { cargo clippy --workspace --all-targets --all-features --locked -- -D warnings; }
rustdoc() { RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --workspace --no-deps --all-features --locked; }
# (Steps run as `run_step NAME COMMAND`, where errexit does not reach into a function: each
# function below chains its commands with && or returns on failure.)
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
# Go's cloud-controller-manager flags, from its own module.
run_step "Go CCM flags (go-ccm-flags)" tools/go-ccm-flags/check.sh
# promtool check/test rules, metric names vs docs/metrics.md.
run_step "alerting rules (alerts.sh)" scripts/alerts.sh
# releases/ and examples/*/deploy/ rendered from charts/cloud-controller-manager.
run_step "release manifests" scripts/release-manifests.sh --check
run_step "Helm chart (helm-check.sh)" scripts/helm-check.sh
run_step "control-plane binaries" control_plane
# Debug, static, linux/amd64 + linux/arm64, arm64 run under qemu; the image tests run these
# archives; release images are built by `scripts/images.sh`.
run_step "container images (images.sh --debug)" scripts/images.sh --debug
run_step "cargo test" cargo test --workspace --all-features --locked "$@"
# The publishable crates at k8s-openapi's earliest and latest.
run_step "Kubernetes versions (k8s-versions.sh)" scripts/k8s-versions.sh
# Package every publishable crate, build an author's crate on the packages.
run_step "crates.io readiness (package.sh)" scripts/package.sh
