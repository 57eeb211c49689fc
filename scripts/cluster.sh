#!/usr/bin/env bash
# A real cluster on this machine with a bundled provider installed from its release
# manifest, as a user installs it: kubelets with --cloud-provider=external, containerd,
# kube-proxy and a CNI in network namespaces made for the run (ccm_test::Cluster), then
# `kubectl apply -f releases/v<version>/<provider>.yaml` with the image pointed at the one
# built here. Prints the initialised Nodes, the Pods and a LoadBalancer Service, and leaves
# the kubeconfig for kubectl until Ctrl-C. Needs root (namespaces, containerd).
#
#   scripts/cluster.sh                       # the fake cloud, until Ctrl-C
#   scripts/cluster.sh --provider do-like    # the DigitalOcean-like cloud and its simulator
#   scripts/cluster.sh --once                # print, then stop (used by .ci/run)
#   scripts/cluster.sh --nodes 3
set -euo pipefail
cd "$(dirname "$0")/.."

provider=fake
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --provider) provider="${2:?--provider needs fake or do-like}"; shift 2 ;;
    --provider=*) provider="${1#--provider=}"; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$provider" in
  fake) images=(fake-cloud-controller-manager) ;;
  do-like) images=(do-like-cloud-controller-manager do-like-api-simulator) ;;
  *) echo "cluster.sh: --provider is fake or do-like, not '$provider'" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "cluster.sh: needs root (network namespaces, containerd)" >&2; exit 1; }

say() { printf '\n==> %s\n' "$*" >&2; }
say "building: the cluster's binaries from Go modules on first use, the images, the launcher"
KUBEBUILDER_ASSETS="$(tools/control-plane/build.sh)"
export KUBEBUILDER_ASSETS
# Inside scripts/test.sh (CCM_IMAGES_BUILT), this run's images are built already, for
# both platforms; rebuilding them here would rewrite archives that tests beside this read.
[ -n "${CCM_IMAGES_BUILT:-}" ] || scripts/images.sh --debug --platform linux/amd64 "${images[@]}"
# (Inside scripts/test.sh, CCM_BINARIES_BUILT: the test build made it.)
[ -n "${CCM_BINARIES_BUILT:-}" ] || cargo build --quiet -p ccm-local-control-plane --bin ccm-local-cluster
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"

say "starting a ${args[*]:+${args[*]} }cluster with the $provider provider"
exec "$target_dir/debug/ccm-local-cluster" --provider "$provider" "${args[@]}"
