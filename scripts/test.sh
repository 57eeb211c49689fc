#!/usr/bin/env bash
# The one test command: formatting, lints, rustdoc, then every test — unit tests, mock
# tests, and the tests against a real kube-apiserver + etcd (built from their Go modules by
# tools/control-plane/build.sh on first use, then reused).
#
#   scripts/test.sh            # everything
#   scripts/test.sh -p ccm-core  # extra arguments go to `cargo test`
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --workspace --no-deps --all-features --locked

step "public API (docs/public-api/*.txt)"
for crate in ccm_core ccm_provider; do
  scripts/public-api.py "$crate" --check
done

step "provider docs: signatures and snippets from the code (scripts/provider-docs.py)"
scripts/provider-docs.py --check

step "Go's cloud-controller-manager flags (tools/go-ccm-flags/check.sh)"
tools/go-ccm-flags/check.sh

step "alerting rules (scripts/alerts.sh: promtool check/test rules, metric names vs docs/metrics.md)"
scripts/alerts.sh

step "release manifests (releases/ and examples/*/deploy/ rendered from charts/cloud-controller-manager)"
scripts/release-manifests.sh --check

step "Helm chart: lint, snapshots, refused values (scripts/helm-check.sh)"
scripts/helm-check.sh

step "control-plane binaries (kube-apiserver, etcd, kubectl)"
KUBEBUILDER_ASSETS="$(tools/control-plane/build.sh)"
export KUBEBUILDER_ASSETS
echo "using $KUBEBUILDER_ASSETS" >&2

step "container images (debug, static, linux/amd64 + linux/arm64, arm64 run under qemu; scripts/images.sh)"
# The image tests run these archives; release images are built by `scripts/images.sh`.
scripts/images.sh --debug

step "cargo test"
cargo test --workspace --all-features --locked "$@"

step "Kubernetes versions: the publishable crates at k8s-openapi's earliest and latest (scripts/k8s-versions.sh)"
scripts/k8s-versions.sh

step "crates.io readiness (scripts/package.sh): package every publishable crate, build an author's crate on the packages"
scripts/package.sh
