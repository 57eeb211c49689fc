#!/usr/bin/env bash
# Kubernetes versions: every publishable crate builds and passes its unit tests at both ends
# of the window k8s-openapi supports (its `earliest` and `latest` features), not only at the
# 1.36 the workspace's tests use. A library must not force the newest: the provider's binary
# picks the version. For each end: `cargo check --all-targets` (the tests against a real
# kube-apiserver must compile), then the unit tests (`--lib`) with the mock-only targets
# (ccm-provider's and ccm-runtime's parsers, ccm-conformance's mock example) in one build,
# and the doc tests (`--doc`).
#
# The version is given as k8s-openapi's feature (`--features k8s-openapi/earliest`), with
# K8S_OPENAPI_ENABLED_VERSION set empty over the workspace's 1.36 (.cargo/config.toml;
# k8s-openapi refuses two versions). A feature, not the variable, so that each version's
# k8s-openapi and what depends on it sit side by side in the workspace's own target folder:
# everything else is compiled once, for the workspace's builds and both ends.
#
#   scripts/k8s-versions.sh                 # earliest and latest
#   scripts/k8s-versions.sh earliest        # one end (or `latest`)
set -euo pipefail
cd "$(dirname "$0")/.."

crates=(ccm-provider ccm-runtime ccm-core ccm-test ccm-conformance)
ends=("$@")
[ "${#ends[@]}" -gt 0 ] || ends=(earliest latest)

metadata="$(cargo metadata --format-version 1 --locked)"
# Until December 2026 the ends were built in a target folder of their own; free its space.
target_dir="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])' <<<"$metadata")"
rm -rf "$target_dir/k8s-versions"

step() { printf '\n==> %s\n' "$*" >&2; }

for end in "${ends[@]}"; do
  # The version an end stands for, from the k8s-openapi in Cargo.lock (`earliest = ["v1_33"]`).
  version="$(python3 -c '
import json, re, sys
end = sys.argv[1]
found = [p for p in json.load(sys.stdin)["packages"] if p["name"] == "k8s-openapi"]
if len(found) != 1:
    sys.exit(f"k8s-versions.sh: {len(found)} k8s-openapi packages in Cargo.lock, expected one")
features = found[0]["features"].get(end)
if not features or len(features) != 1 or not re.fullmatch(r"v1_\d+", features[0]):
    version = found[0]["version"]
    sys.exit(f"k8s-versions.sh: k8s-openapi {version} has no feature {end!r} naming one version: {features}")
print("1." + features[0][len("v1_"):])
' "$end" <<<"$metadata")"
  (
    export K8S_OPENAPI_ENABLED_VERSION=
    packages=(--features "k8s-openapi/$end")
    for crate in "${crates[@]}"; do packages+=(-p "$crate"); done

    step "$end (Kubernetes $version): cargo check --all-targets"
    cargo check --locked --all-targets --all-features "${packages[@]}"
    # One build for all: with the same packages and features as the check, the
    # dependencies compile once (alone, `-p ccm-provider` resolved them anew).
    step "$end (Kubernetes $version): unit tests and the mock-only test targets"
    cargo test --locked --all-features "${packages[@]}" --lib --test parsers --example unit_test_with_mocks
    step "$end (Kubernetes $version): doc tests"
    cargo test --locked --all-features "${packages[@]}" --doc
  )
done
echo "k8s-versions.sh: ok (${crates[*]} at ${ends[*]})" >&2
