#!/usr/bin/env bash
# crates.io readiness: packages every publishable crate (`cargo package`), builds each from
# its .crate alone, as `cargo package` would verify it, then builds a provider author's crate
# (tests/author-crate) that depends on those packages, not on the workspace: its mock unit
# test, its binary, and a real-apiserver test through the packaged ccm-test, which must find
# or build its control plane on its own (no KUBEBUILDER_ASSETS; an empty cache folder, so it
# builds from the Go module files it carries; Go's caches make that a link step once warm);
# then its cluster test: the author's image by ccm-test's recipe, installed with the chart
# into a real cluster (root), its Nodes initialised.
#
#   scripts/package.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

# In dependency order. Everything else in the workspace is `publish = false`.
crates=(ccm-provider ccm-runtime ccm-core ccm-test ccm-conformance)

# Libraries on k8s-openapi build only with a Kubernetes version chosen, as docs.rs does: the
# workspace's (.cargo/config.toml), set here too because the author's crate below lives in
# the target folder, which may be outside the workspace. The same value everywhere, so
# nothing built with it is rebuilt.
K8S_OPENAPI_ENABLED_VERSION="$(python3 -c '
import sys, tomllib
print(tomllib.load(open(".cargo/config.toml", "rb"))["env"]["K8S_OPENAPI_ENABLED_VERSION"])')"
export K8S_OPENAPI_ENABLED_VERSION
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
# Until December 2026 packages were verified in a target folder of their own; free its space.
rm -rf "$target_dir/package-verify"

echo "package.sh: cargo package ${crates[*]}" >&2
# --allow-dirty: the test command runs on working trees too; CI's clone is clean.
# --no-verify: each package is built from its .crate below, in the workspace's target folder
# with the author's crate, so that dependencies compiled for the workspace are reused (cargo's
# own verification builds in a folder of its own, every dependency again, and never rebuilds
# a registry crate whose version it has built, which ours keep between changes).
cargo package --locked --allow-dirty --no-verify --quiet $(printf -- '-p %s ' "${crates[@]}")

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
# (Until December 2026 the packages were unpacked into crates/, every run over the last.)
rm -rf "$work/src" "$work/tests" "$work/unpacked" "$work/crates"
mkdir -p "$work/packages" "$work/unpacked"
for crate in "${crates[@]}"; do
  version="$(cargo pkgid -p "$crate" | sed 's/.*[#@]//')"
  tar -xzf "$target_dir/package/$crate-$version.crate" -C "$work/unpacked"
done
# `cargo package` gives every file of a .crate the same fixed time (2006), so cargo, which
# finds changed sources by their times, would take a changed package for the one it built
# last time at this path. Files whose content changed are written anew (the time now), the
# others keep theirs, so only what changed is rebuilt.
python3 - "$work/unpacked" "$work/packages" <<'PY'
import filecmp, os, shutil, sys
source, dest = sys.argv[1], sys.argv[2]
wanted = set()
for root, _, files in os.walk(source):
    for name in files:
        relative = os.path.relpath(os.path.join(root, name), source)
        wanted.add(relative)
        target = os.path.join(dest, relative)
        if not (os.path.isfile(target) and filecmp.cmp(os.path.join(source, relative), target, shallow=False)):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(source, relative), target)
for root, _, files in os.walk(dest):
    for name in files:
        path = os.path.join(root, name)
        if os.path.relpath(path, dest) not in wanted:
            os.remove(path)
PY
rm -rf "$work/unpacked"
cp -rp tests/author-crate/src tests/author-crate/tests "$work/"
{
  cat tests/author-crate/Cargo.toml
  echo
  echo "# Added by scripts/package.sh: the packaged crates stand in for crates.io."
  echo "[patch.crates-io]"
  for crate in "${crates[@]}"; do
    version="$(cargo pkgid -p "$crate" | sed 's/.*[#@]//')"
    echo "$crate = { path = \"packages/$crate-$version\" }"
  done
} | python3 -c '
import sys
# The packages are members of the author workspace, so each can be built alone below.
text = sys.stdin.read()
if text.count("\n[workspace]\n") != 1:
    sys.exit("package.sh: tests/author-crate/Cargo.toml must have one [workspace] table")
sys.stdout.write(text.replace("\n[workspace]\n", "\n[workspace]\nmembers = [\".\", \"packages/*\"]\n"))
' >"$work/Cargo.toml"
# The workspace's versions of every dependency, so the author's build reuses compiled ones.
cp Cargo.lock "$work/Cargo.lock"

cache="$(mktemp -d "${TMPDIR:-/tmp}/author-cache.XXXXXX")"
trap 'rm -rf "$cache"' EXIT
echo "package.sh: the author's crate: unit test with mocks, binary, real-apiserver test" >&2
(
  cd "$work"
  unset KUBEBUILDER_ASSETS TEST_ASSET_KUBE_APISERVER TEST_ASSET_ETCD TEST_ASSET_KUBECTL
  export CARGO_TARGET_DIR="$target_dir" CCM_CACHE_DIR="$cache" XDG_DATA_HOME="$cache"
  # What `cargo package` verifies: each package compiles from its .crate alone, with its
  # default features and nothing from the workspace. A check, not a build: these are
  # libraries, so code generation finds nothing more (no binary is linked), and each
  # package's own feature set would compile its dependencies' code once more; the
  # author's crate below builds and links against all of them.
  for crate in "${crates[@]}"; do
    echo "package.sh: checking $crate from its package" >&2
    cargo check --quiet -p "$crate"
  done
  cargo test --quiet
  cargo build --quiet --bin acme-cloud-controller-manager
  "$target_dir/debug/acme-cloud-controller-manager" --help >/dev/null
  test -x "$cache/control-plane/"*/kube-apiserver || {
    echo "package.sh: the packaged ccm-test did not build its control plane into $cache" >&2
    exit 1
  }
)
# The cluster level, as the author runs it (tests/author-crate/tests/cluster.rs, ignored by a
# plain `cargo test`): its image built by the recipe the packaged ccm-test ships, installed
# with this repository's chart into a real cluster, every Node initialised. With the test
# command's binaries and caches (KUBEBUILDER_ASSETS, CCM_CACHE_DIR): building them is what
# the control-plane test above proves.
echo "package.sh: the author's crate: its image, installed by the chart into a cluster" >&2
(
  cd "$work"
  export CARGO_TARGET_DIR="$target_dir" HELM="${HELM:-$("$repo/tools/helm/build.sh")}" \
    CCM_CHART="$repo/charts/cloud-controller-manager"
  cargo test --quiet --test cluster -- --ignored
)
echo "package.sh: ok (${crates[*]} packaged; the author's crate builds, links and tests against them, and its image runs in a cluster from the chart)" >&2
