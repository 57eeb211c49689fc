#!/usr/bin/env bash
# crates.io readiness: packages every publishable crate (`cargo package`, which builds each
# from its .crate alone), then builds a provider author's crate (tests/author-crate) that
# depends on those packages, not on the workspace: its mock unit test, its binary, and a
# real-apiserver test through the packaged ccm-test, which must find or build its control
# plane on its own (no KUBEBUILDER_ASSETS; an empty cache folder, so it builds from the Go
# module files it carries; Go's caches make that a link step once warm).
#
#   scripts/package.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# In dependency order. Everything else in the workspace is `publish = false`.
crates=(ccm-provider ccm-runtime ccm-core ccm-test ccm-conformance)

# Libraries on k8s-openapi build only with a Kubernetes version chosen, as docs.rs does.
export K8S_OPENAPI_ENABLED_VERSION="${K8S_OPENAPI_ENABLED_VERSION:-1.36}"
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"

# Verification builds each package as a registry crate, and cargo never rebuilds a registry
# crate of a version it has built: ours keep their version between changes, so they are
# verified in a target folder of their own (dependencies cached there between runs) from
# which our crates' old builds are removed first.
verify_dir="$target_dir/package-verify"
if [ -d "$verify_dir/debug" ]; then
  find "$verify_dir/debug" -mindepth 1 -maxdepth 2 \
    \( -name 'ccm-*' -o -name 'ccm_*' -o -name 'libccm_*' \) -exec rm -rf {} +
fi
# Cargo unpacks each package it verifies into $CARGO_HOME/registry/src/<overlay>/ and never
# unpacks a version it finds there again: without this, a second run verifies against the
# first run's sources of our crates (which keep their version between changes).
for src in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/; do
  case "$src" in */index.crates.io-*) continue ;; esac
  for crate in "${crates[@]}"; do
    version="$(cargo pkgid -p "$crate" | sed 's/.*[#@]//')"
    rm -rf "$src$crate-$version"
  done
done
echo "package.sh: cargo package ${crates[*]}" >&2
# --allow-dirty: the test command runs on working trees too; CI's clone is clean.
CARGO_TARGET_DIR="$verify_dir" cargo package --locked --allow-dirty --quiet \
  $(printf -- '-p %s ' "${crates[@]}")

unpublishable="$(cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
want = set(sys.argv[1:])
for p in json.load(sys.stdin)["packages"]:
    if p["name"] not in want and p["publish"] != []:
        print(p["name"])
' "${crates[@]}")"
if [ -n "$unpublishable" ]; then
  echo "package.sh: these crates would be published but are not packaged here; set publish = false or add them: $unpublishable" >&2
  exit 1
fi

# What crates.io and docs.rs show: every field set and valid, before anything is uploaded.
cargo metadata --format-version 1 --no-deps | python3 -c '
import json, os, re, sys
want = sys.argv[1:]
# crates.io category slugs used here (https://crates.io/category_slugs).
categories = {"api-bindings", "asynchronous", "development-tools::testing", "network-programming"}
bad = []
for p in json.load(sys.stdin)["packages"]:
    if p["name"] not in want:
        continue
    name = p["name"]
    for field in ("description", "license", "repository", "homepage", "rust_version", "readme"):
        if not p.get(field):
            bad.append(f"{name}: {field} is not set")
    readme = p.get("readme")
    if readme and not os.path.isfile(os.path.join(os.path.dirname(p["manifest_path"]), readme)):
        bad.append(f"{name}: readme {readme} does not exist")
    keywords, cats, licence = p["keywords"], p["categories"], p["license"]
    if not 1 <= len(keywords) <= 5 or any(not re.fullmatch(r"[a-z][a-z0-9_-]{0,19}", k) for k in keywords):
        bad.append(f"{name}: keywords {keywords}: 1 to 5, lowercase, at most 20 characters")
    if not cats or not set(cats) <= categories:
        bad.append(f"{name}: categories {cats} not among {sorted(categories)}")
    if "rs" not in ((p.get("metadata") or {}).get("docs") or {}):
        bad.append(f"{name}: no [package.metadata.docs.rs] (k8s-openapi needs a version feature there)")
    if licence and licence != "Apache-2.0":
        bad.append(f"{name}: license {licence}, the project is Apache-2.0")
if bad:
    print("package.sh: crate metadata:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
' "${crates[@]}"

# The author's crate, at a fixed path (its build cache stays valid between runs).
work="$target_dir/author-crate"
rm -rf "$work/src" "$work/tests" "$work/crates"
mkdir -p "$work/crates"
for crate in "${crates[@]}"; do
  version="$(cargo pkgid -p "$crate" | sed 's/.*[#@]//')"
  tar -xzf "$verify_dir/package/$crate-$version.crate" -C "$work/crates"
done
cp -r tests/author-crate/src tests/author-crate/tests "$work/"
{
  cat tests/author-crate/Cargo.toml
  echo
  echo "# Added by scripts/package.sh: the packaged crates stand in for crates.io."
  echo "[patch.crates-io]"
  for crate in "${crates[@]}"; do
    version="$(cargo pkgid -p "$crate" | sed 's/.*[#@]//')"
    echo "$crate = { path = \"crates/$crate-$version\" }"
  done
} >"$work/Cargo.toml"
# The workspace's versions of every dependency, so the author's build reuses compiled ones.
cp Cargo.lock "$work/Cargo.lock"

cache="$(mktemp -d "${TMPDIR:-/tmp}/author-cache.XXXXXX")"
trap 'rm -rf "$cache"' EXIT
echo "package.sh: the author's crate: unit test with mocks, binary, real-apiserver test" >&2
(
  cd "$work"
  unset KUBEBUILDER_ASSETS TEST_ASSET_KUBE_APISERVER TEST_ASSET_ETCD TEST_ASSET_KUBECTL
  # The author's crate picks its version with k8s-openapi's `v1_36`, as the workspace does.
  # With K8S_OPENAPI_ENABLED_VERSION set too, k8s-openapi's build script would run anew in
  # the shared target folder, and the next build of the workspace would rebuild k8s-openapi
  # and all that depends on it.
  unset K8S_OPENAPI_ENABLED_VERSION
  export CARGO_TARGET_DIR="$target_dir" CCM_CACHE_DIR="$cache" XDG_DATA_HOME="$cache"
  cargo test --quiet
  cargo build --quiet --bin acme-cloud-controller-manager
  "$target_dir/debug/acme-cloud-controller-manager" --help >/dev/null
  test -x "$cache/control-plane/"*/kube-apiserver || {
    echo "package.sh: the packaged ccm-test did not build its control plane into $cache" >&2
    exit 1
  }
)
echo "package.sh: ok (${crates[*]} packaged; the author's crate builds, links and tests against them)" >&2
