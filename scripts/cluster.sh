#!/usr/bin/env bash
# A real cluster on this machine with a bundled provider installed from its release
# manifest, as a user installs it: kubelets with --cloud-provider=external, containerd,
# kube-proxy and a CNI in network namespaces made for the run (ccm_test::Cluster), then
# `kubectl apply -f releases/v<version>/<provider>.yaml` with the image pointed at the one
# built here. Prints the initialised Nodes, the Pods and a LoadBalancer Service, and leaves
# the kubeconfig for kubectl until Ctrl-C. Or a provider author's own CCM: its crate's image
# built (crates/ccm-test/provider-image.sh) and installed with the Helm chart and the
# author's values, its initialised Nodes printed. Needs root (namespaces, containerd).
#
#   scripts/cluster.sh                       # the fake cloud, until Ctrl-C
#   scripts/cluster.sh --provider do-like    # the DigitalOcean-like cloud and its simulator
#   scripts/cluster.sh --once                # print, then stop (used by .ci/run)
#   scripts/cluster.sh --nodes 3
#   scripts/cluster.sh --nodes 4 --zones 3   # the fake cloud: workers in zone-a, -b, -c
#   scripts/cluster.sh --provider do-like --pod-routes cloud   # Pod routes: the CCM's only
#   scripts/cluster.sh --provider do-like --dual-stack         # IPv4/IPv6 nodes, Pods, LBs
#   scripts/cluster.sh --crate ../acme --values acme-values.yaml   # your provider's CCM
#   scripts/cluster.sh --image acme.tar --values acme-values.yaml  # ... from its image
#
# In --values, ${NODES} becomes the nodes' names as a YAML list (for a cloud-config that
# lists its instances); the chart is charts/cloud-controller-manager (--chart DIR: another).
# More options: target/debug/ccm-local-cluster --help.
set -euo pipefail
# Paths given relative to the caller's folder stay so after the cd below.
caller="$PWD"
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }
cd "$(dirname "$0")/.."

provider=""
crate=""
values=false
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --provider) provider="${2:?--provider needs fake or do-like}"; shift 2 ;;
    --provider=*) provider="${1#--provider=}"; shift ;;
    --crate) crate="$(absolute "${2:?--crate needs the folder of your provider crate}")"; shift 2 ;;
    --crate=*) crate="$(absolute "${1#--crate=}")"; shift ;;
    --values) values=true; args+=("$1" "$(absolute "${2:?--values needs a file}")"); shift 2 ;;
    --values=*) values=true; args+=("--values=$(absolute "${1#--values=}")"); shift ;;
    --image|--manifest|--chart|--kubeconfig)
      args+=("$1" "$(absolute "${2:?$1 needs a path}")"); shift 2 ;;
    --image=*|--manifest=*|--chart=*|--kubeconfig=*)
      args+=("${1%%=*}=$(absolute "${1#*=}")"); shift ;;
    -h|--help) sed -n '2,22p' "$self"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
# Without --values the bundled fake cloud, as before; with them and no --provider, yours.
$values || provider="${provider:-fake}"
images=()
case "$provider" in
  "") ;;
  fake) images=(fake-cloud-controller-manager) ;;
  do-like) images=(do-like-cloud-controller-manager do-like-api-simulator) ;;
  *) echo "cluster.sh: --provider is fake or do-like, not '$provider'" >&2; exit 2 ;;
esac
[ -z "$crate" ] || $values || { echo "cluster.sh: --crate needs --values FILE (the chart's values for your provider)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "cluster.sh: needs root (network namespaces, containerd)" >&2; exit 1; }

say() { printf '\n==> %s\n' "$*" >&2; }
say "building: the cluster's binaries from Go modules on first use, the images, the launcher"
KUBEBUILDER_ASSETS="$(tools/control-plane/build.sh)"
export KUBEBUILDER_ASSETS
# Inside scripts/test.sh (CCM_IMAGES_BUILT), this run's images are built already, for
# both platforms; rebuilding them here would rewrite archives that tests beside this read.
if [ ${#images[@]} -gt 0 ] && [ -z "${CCM_IMAGES_BUILT:-}" ]; then
  scripts/images.sh --debug --platform linux/amd64 "${images[@]}"
fi
if [ -n "$crate" ]; then
  say "building the image of $crate (crates/ccm-test/provider-image.sh, debug, linux/amd64)"
  archive="$(crates/ccm-test/provider-image.sh --manifest-path "$crate/Cargo.toml" --platform linux/amd64 --debug)"
  args+=(--image "$archive")
fi
if $values; then
  HELM="${HELM:-$(tools/helm/build.sh)}"
  export HELM
fi
# (Inside scripts/test.sh, CCM_BINARIES_BUILT: the test build made it.)
[ -n "${CCM_BINARIES_BUILT:-}" ] || cargo build --quiet -p ccm-local-control-plane --bin ccm-local-cluster
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"

say "starting a cluster${args[*]:+ (${args[*]})} with ${provider:+the $provider provider}${provider:-your provider}"
exec "$target_dir/debug/ccm-local-cluster" ${provider:+--provider "$provider"} "${args[@]}"
