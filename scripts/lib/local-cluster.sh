# Shared by scripts/demo.sh, examples/do-like-cloud/quickstart.sh and
# scripts/peer-digitalocean.sh (sourced, from the
# repository root, under `set -euo pipefail`): messages, the build, a work folder cleaned
# up on exit with every started process, and a local control plane.
#
#   build_and_start_cluster WORK_PREFIX CARGO_BUILD_ARGS...
#     sets KUBEBUILDER_ASSETS, target_dir, kubectl, work, KUBECONFIG; appends to pids.
#   start_simulator ARGS...
#     starts do-like-api-simulator on 127.0.0.1 with ARGS (the token files, droplets, ...),
#     logging to $work/simulator.log; sets api_url, appends to pids.
#   service_lbs
#     prints "name id ip" of each LoadBalancer Service (with $kubectl): its DigitalOcean
#     load balancer ID annotation and its ingress address.
#   request_delta BEFORE AFTER
#     prints "route: count" of each route whose count (JSON objects of the simulator's
#     /admin/stats "requests") grew from BEFORE to AFTER.
#   register_nodes PREFIX COUNT
#     creates Nodes PREFIX1 .. PREFIXCOUNT as kubelets with --cloud-provider=external
#     register them: tainted uninitialized, pod CIDR 10.244.N.0/24, no provider ID.

if [ -t 2 ]; then
  say() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }
else
  say() { printf '\n==> %s\n' "$*" >&2; }
fi

pids=()
cleanup() {
  trap - EXIT INT TERM
  say "stopping"
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}

build_and_start_cluster() {
  local prefix="$1"
  shift
  say "building (control-plane binaries from Go modules on first use, then the Rust binaries)"
  KUBEBUILDER_ASSETS="$(tools/control-plane/build.sh)"
  export KUBEBUILDER_ASSETS
  # Inside scripts/test.sh (CCM_BINARIES_BUILT) the test build made every binary already,
  # with the test run's features: building another feature set would rewrite binaries that
  # the tests beside this run.
  [ -n "${CCM_BINARIES_BUILT:-}" ] || cargo build --quiet -p ccm-local-control-plane "$@"
  target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  kubectl="$KUBEBUILDER_ASSETS/kubectl"

  work="$(mktemp -d "${TMPDIR:-/tmp}/$prefix.XXXXXX")"
  trap cleanup EXIT
  trap 'exit 130' INT TERM

  say "starting a local control plane"
  "$target_dir/debug/ccm-local-control-plane" --kubeconfig "$work/kubeconfig" >"$work/control-plane.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do
    [ -s "$work/kubeconfig" ] && grep -q "Press Ctrl-C" "$work/control-plane.log" && break
    kill -0 "${pids[0]}" 2>/dev/null || { cat "$work/control-plane.log" >&2; exit 1; }
    sleep 0.1
  done
  export KUBECONFIG="$work/kubeconfig"
}

start_simulator() {
  # The file exists before the simulator starts: the shell opens a background job's
  # redirections in the job, so the first read below could come before it (and a failed
  # read ends this script, under `set -e`).
  : >"$work/simulator.out"
  "$target_dir/debug/do-like-api-simulator" --listen 127.0.0.1:0 "$@" \
    >"$work/simulator.out" 2>"$work/simulator.log" &
  local pid=$!
  pids+=("$pid")
  api_url=""
  for _ in $(seq 1 100); do
    api_url="$(sed -n 's/^listening on //p' "$work/simulator.out")"
    [ -n "$api_url" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/simulator.log" >&2
  echo "the simulator did not start" >&2
  exit 1
}

service_lbs() {
  "$kubectl" get services -o jsonpath='{range .items[?(@.spec.type=="LoadBalancer")]}{.metadata.name} {.metadata.annotations.kubernetes\.digitalocean\.com/load-balancer-id} {.status.loadBalancer.ingress[0].ip}{"\n"}{end}' | sort
}

request_delta() {
  python3 -c '
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for key in sorted(after):
    if after[key] != before.get(key, 0):
        print(f"{key}: {after[key] - before.get(key, 0)}")
' "$1" "$2"
}

register_nodes() {
  local prefix="$1" count="$2" i
  for i in $(seq 1 "$count"); do
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $prefix$i
  labels: {kubernetes.io/hostname: $prefix$i}
spec:
  podCIDR: 10.244.$i.0/24
  podCIDRs: [10.244.$i.0/24]
  taints:
  - {key: node.cloudprovider.kubernetes.io/uninitialized, value: "true", effect: NoSchedule}
---
EOF
  done | "$kubectl" apply -f - >&2
}
