#!/usr/bin/env bash
# DigitalOcean's own CCM against the DO-like simulator, then ours in its place: the peer
# that judges the simulator's claim to speak DigitalOcean's API and our claim to take that
# CCM's place. Run by hand: CI has no copy of DigitalOcean's source.
#
#   scripts/peer-digitalocean.sh SOURCE_DIR [--record FILE] [--shadow]
#   scripts/peer-digitalocean.sh SOURCE_DIR --e2e [--subset | --focus RE]
#   scripts/peer-digitalocean.sh SOURCE_DIR --swap-in-cluster
#   scripts/peer-digitalocean.sh SOURCE_DIR --bench [ccm-bench-cloud arguments]
#
# SOURCE_DIR is a checkout of github.com/digitalocean/digitalocean-cloud-controller-manager
# (its modules are vendored: it builds offline). The binary is built once per commit, static,
# under $CCM_CACHE_DIR/peer-digitalocean/. Then, on a local control plane:
#   1. the simulator (three droplets) and DigitalOcean's CCM (REGION set, so it never asks
#      the droplet metadata address; DO_OVERRIDE_URL at the simulator), three Nodes
#      registered as kubelets do (tainted, no provider ID) and three LoadBalancer Services,
#      two with DigitalOcean annotations; it waits until the Nodes are initialised and the
#      Services have an address, then deletes the third Service (and so its load balancer);
#   2. with --record FILE: every request shape DigitalOcean's CCM sent (method, route, query
#      keys) is written to FILE, the list the simulator's contract test checks
#      (examples/do-like-simulator/tests/data/digitalocean-ccm-requests.txt);
#   3. the swap: DigitalOcean's CCM stopped, ours started with the same cloud and cluster;
#      it prints, per Service, the load balancer's ID and address before and after, and the
#      requests ours sent in its first 20 seconds. 0 load balancers re-created and 0
#      addresses changed is the pass; the script fails otherwise;
#   4. the swap back: ours stopped, DigitalOcean's CCM started again, the same check.
# With --shadow, between 1 and 3: ours started with --shadow beside DigitalOcean's CCM (as
# docs/deploying.md's "Switching from another CCM" has an operator do), its plan
# (/debug/shadow/plan) printed after its first passes; any planned load-balancer change
# other than the tags (a `refuse` of the one named with do-loadbalancer-name aside) fails
# the run (issue 66).
#
# With --e2e, instead: DigitalOcean's CCM in a real cluster, as its users install it. Its
# image is built FROM scratch as ours are (the static binary at /bin, CA certificates),
# its release manifest (releases/digitalocean-cloud-controller-manager/v<its VERSION>.yml)
# gets the Secret of releases/secret.yml.tmpl with the simulator's token, the image built
# here, and DO_OVERRIDE_URL and REGION in its env; scripts/e2e-upstream.sh then runs
# Kubernetes' LoadBalancers specs against it (the rest of the arguments are its own), with
# the DO-like simulator and data plane as the cloud. Needs root and buildah.
#
# With --bench, instead: ccm-bench-cloud (bench/cloud) runs ours and DigitalOcean's CCM one at
# a time, alternating, against the simulator with a cloud's timing (a load balancer active
# a second after its create, 50 ms a request, by default), and prints the side-by-side
# table of docs/benchmarks.md ("Load balancers with a cloud's timing"); the rest of the
# arguments are its own (--services N, --repeat N, ...).
#
# With --swap-in-cluster: ours installed in a real cluster from our release manifest, two
# LoadBalancer Services served by it, then ours deleted and DigitalOcean's applied from its
# manifest as above, with requests running through both load balancers all along
# (scripts/lib/swap-to-digitalocean.sh): the same IDs and addresses, no request failed.
set -euo pipefail
cd "$(dirname "$0")/.."

source_dir="${1:?usage: scripts/peer-digitalocean.sh SOURCE_DIR [--record FILE]}"
shift
record=""
e2e=false
bench=false
swap_in_cluster=false
shadow=false
while [ $# -gt 0 ]; do
  case "$1" in
    --record) record="${2:?--record needs a FILE}"; shift 2 ;;
    --e2e) e2e=true; shift; break ;;
    --bench) bench=true; shift; break ;;
    --swap-in-cluster) swap_in_cluster=true; shift ;;
    --shadow) shadow=true; shift ;;
    *) echo "peer-digitalocean: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -d "$source_dir/cloud-controller-manager/cmd/digitalocean-cloud-controller-manager" ] || {
  echo "peer-digitalocean: $source_dir is not a checkout of digitalocean-cloud-controller-manager" >&2
  exit 2
}
source_dir="$(cd "$source_dir" && pwd)"
[ -z "$record" ] || record="$(cd "$(dirname "$record")" && pwd)/$(basename "$record")"

commit="$(git -C "$source_dir" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
cache="${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/peer-digitalocean/$commit"
do_ccm="$cache/digitalocean-cloud-controller-manager"
if [ "$commit" = unknown ] || [ ! -x "$do_ccm" ]; then
  echo "peer-digitalocean: building DigitalOcean's CCM at $commit (go build -mod=vendor; minutes)" >&2
  mkdir -p "$cache"
  (cd "$source_dir" && CGO_ENABLED=0 GOFLAGS=-mod=vendor GOTOOLCHAIN=local \
    go build -o "$do_ccm.tmp" ./cloud-controller-manager/cmd/digitalocean-cloud-controller-manager)
  mv "$do_ccm.tmp" "$do_ccm"
fi

# Its image (FROM scratch) and its release manifest pointed at the simulator, into $archive,
# $image and $manifest.
image_and_manifest() {
  version="$(tr -d ' \n' <"$source_dir/VERSION")"
  version="${version#v}"
  release="$source_dir/releases/digitalocean-cloud-controller-manager/v$version.yml"
  [ -f "$release" ] || { echo "peer-digitalocean: no release manifest $release" >&2; exit 2; }
  image="localhost/digitalocean-cloud-controller-manager:$commit"
  archive="$cache/image.tar"
  if [ ! -f "$archive" ]; then
    echo "peer-digitalocean: building its image $image (FROM scratch)" >&2
    context="$(mktemp -d)"
    mkdir -p "$context/bin"
    cp "$do_ccm" "$context/bin/digitalocean-cloud-controller-manager"
    cp /etc/ssl/certs/ca-certificates.crt "$context/"
    printf '%s\n' 'FROM scratch' \
      'COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt' \
      'COPY bin/digitalocean-cloud-controller-manager /bin/digitalocean-cloud-controller-manager' \
      'ENTRYPOINT ["/bin/digitalocean-cloud-controller-manager"]' >"$context/Containerfile"
    buildah=(buildah --storage-driver vfs)
    "${buildah[@]}" rmi "$image" >/dev/null 2>&1 || true
    "${buildah[@]}" bud --quiet --isolation chroot --layers=false -t "$image" "$context" >/dev/null
    "${buildah[@]}" push --quiet --format oci "$image" "oci-archive:$archive.tmp:$image"
    "${buildah[@]}" rmi "$image" >/dev/null
    mv "$archive.tmp" "$archive"
    rm -rf "$context"
  fi
  # Its release manifest as its README says to install it (the Secret first), pointed at
  # the simulator; ccm-local-cluster fills in ${CLOUD_API_URL} and ${CLOUD_API_TOKEN}.
  manifest="$cache/manifest.yaml"
  python3 - "$source_dir/releases/secret.yml.tmpl" "$release" "$image" >"$manifest" <<'EOF'
import sys
secret, release, image = (open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3])
placeholder = '"REPLACE WITH DO ACCESS TOKEN"'
assert secret.count(placeholder) == 1, "secret.yml.tmpl has no token placeholder"
secret = secret.replace(placeholder, '"${CLOUD_API_TOKEN}"')
prefix = "- image: digitalocean/digitalocean-cloud-controller-manager:"
images = [line for line in release.splitlines() if line.strip().startswith(prefix)]
assert len(images) == 1, f"{len(images)} images of the CCM in {sys.argv[2]}"
release = release.replace(images[0], images[0].split("- image:")[0] + "- image: " + image)
token_env = "          - name: DO_ACCESS_TOKEN\n"
assert release.count(token_env) == 1, "no DO_ACCESS_TOKEN in the env"
more = ('          - name: DO_OVERRIDE_URL\n            value: "${CLOUD_API_URL}"\n'
        '          - name: REGION\n            value: nyc1\n')
release = release.replace(token_env, more + token_env)
print("# DigitalOcean's CCM release manifest, pointed at the DO-like simulator by")
print("# scripts/peer-digitalocean.sh --e2e.")
print(secret.rstrip() + "\n" + release)
EOF
}

if $bench; then
  echo "peer-digitalocean: ours against DigitalOcean's CCM ($commit), load balancers with a cloud's timing" >&2
  exec cargo run --quiet --release -p ccm-bench-cloud -- --ccm rust,digitalocean \
    --digitalocean-ccm "$do_ccm" "$@"
fi
if $e2e; then
  image_and_manifest
  echo "peer-digitalocean: running Kubernetes' LoadBalancers specs against DigitalOcean's CCM $version ($commit)" >&2
  exec scripts/e2e-upstream.sh --manifest "$manifest" --image "$archive" "$@"
fi
if $swap_in_cluster; then
  image_and_manifest
  KUBEBUILDER_ASSETS="$(tools/control-plane/build.sh)"
  scripts/images.sh --debug --platform linux/amd64 do-like-cloud-controller-manager do-like-api-simulator
  cargo build --quiet -p ccm-local-control-plane --bin ccm-local-cluster
  target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  echo "peer-digitalocean: ours, then DigitalOcean's CCM $version ($commit), in a real cluster" >&2
  exec "$target_dir/debug/ccm-local-cluster" --provider do-like --nodes 3 --once --image "$archive" \
    --exec "$PWD/scripts/lib/swap-to-digitalocean.sh" "$KUBEBUILDER_ASSETS/kubectl" "$manifest"
fi

# shellcheck source=scripts/lib/local-cluster.sh
source scripts/lib/local-cluster.sh
build_and_start_cluster ccm-peer-do -p ccm-do-like-cloud -p ccm-do-like-simulator --bins

python3 -c 'import secrets; print(secrets.token_hex(16))' >"$work/token"
python3 -c 'import secrets; print(secrets.token_hex(16))' >"$work/admin-token"
chmod 600 "$work/token" "$work/admin-token"
start_simulator --token-file "$work/token" --admin-token-file "$work/admin-token" \
  --droplets 3 --lb-activation-ms 1000

# The simulator's /admin/stats, or one field of it.
stats() {
  python3 - "$api_url" "$work/admin-token" "$@" <<'EOF'
import json, sys, urllib.request
url, token = sys.argv[1], open(sys.argv[2]).read().strip()
req = urllib.request.Request(url + "/admin/stats", headers={"Authorization": "Bearer " + token})
stats = json.load(urllib.request.urlopen(req))
for key in sys.argv[3:]:
    stats = stats[key]
print(json.dumps(stats, indent=1, sort_keys=True))
EOF
}

# The requests sent since FILE was written (`stats requests` then), by route: count.
requests_since() { request_delta "$(cat "$1")" "$(stats requests)" >&2; }

say "starting DigitalOcean's CCM ($commit) against $api_url"
do_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
start_do_ccm() { # start_do_ccm LOG: DigitalOcean's CCM in the background, its pid in do_pid
  # DEBUG_ADDR serves its health check, which asks the API (GET /v2/account).
  DO_ACCESS_TOKEN="$(cat "$work/token")" DO_OVERRIDE_URL="$api_url" REGION=nyc1 \
    DEBUG_ADDR="127.0.0.1:$do_port" \
    "$do_ccm" --cloud-provider=digitalocean --kubeconfig="$KUBECONFIG" --leader-elect=false \
    --configure-cloud-routes=false --secure-port=0 --authentication-skip-lookup \
    --controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller \
    >"$work/$1" 2>&1 &
  do_pid=$!
  pids+=("$do_pid")
}
start_do_ccm do-ccm.log

register_nodes node- 3
"$kubectl" apply -f - >&2 <<'EOF'
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  annotations:
    service.beta.kubernetes.io/do-loadbalancer-protocol: http
    service.beta.kubernetes.io/do-loadbalancer-healthcheck-path: /healthz
    service.beta.kubernetes.io/do-loadbalancer-algorithm: least_connections
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata:
  name: dns
  namespace: default
  annotations:
    service.beta.kubernetes.io/do-loadbalancer-name: peer-dns
spec:
  type: LoadBalancer
  selector: {app: dns}
  ports: [{name: dns, port: 53, targetPort: 5353, protocol: UDP}]
---
apiVersion: v1
kind: Service
metadata:
  name: gone
  namespace: default
spec:
  type: LoadBalancer
  selector: {app: gone}
  ports: [{name: tcp, port: 8443, targetPort: 8443}]
EOF

wait_converged() { # wait_converged WHO LOG SERVICES
  for _ in $(seq 1 600); do
    initialized=$("$kubectl" get nodes -o jsonpath='{range .items[*]}{.spec.providerID}{"\n"}{end}' | grep -c '^digitalocean://' || true)
    addressed=$(service_lbs | awk 'NF == 3' | wc -l)
    if [ "$initialized" = 3 ] && [ "$addressed" = "$3" ]; then return 0; fi
    sleep 0.2
  done
  say "$1 did not converge; its log:"
  tail -40 "$work/$2" >&2
  return 1
}
say "waiting for DigitalOcean's CCM"
wait_converged "DigitalOcean's CCM" do-ccm.log 3
say "deleting the Service gone: DigitalOcean's CCM deletes its load balancer"
"$kubectl" delete service gone --wait=true --timeout=120s >&2
"$kubectl" get nodes -o wide >&2
curl -sf "http://127.0.0.1:$do_port/healthz" >&2 || { say "its health check failed"; exit 1; }
before="$(service_lbs)"
echo "$before" >&2
stats request_shapes >"$work/do-shapes.json"
say "requests DigitalOcean's CCM sent (method, route, query keys: count)"
cat "$work/do-shapes.json" >&2
if [ -n "$record" ]; then
  {
    echo "# The requests DigitalOcean's CCM sent the DO-like simulator (method, route, query keys),"
    echo "# recorded by scripts/peer-digitalocean.sh from github.com/digitalocean/"
    echo "# digitalocean-cloud-controller-manager at $commit: three Nodes, three LoadBalancer"
    echo "# Services (http with a health-check path and an algorithm; UDP with a name; plain"
    echo "# TCP, then deleted), its health check (DEBUG_ADDR). The simulator's contract test"
    echo "# (examples/do-like-simulator/tests/golden.rs) answers each in DigitalOcean's shape."
    python3 -c 'import json,sys; [print(k) for k in sorted(json.load(open(sys.argv[1])))]' "$work/do-shapes.json"
  } >"$record"
  say "recorded $(grep -vc '^#' "$record") request shapes in $record"
fi

cat >"$work/cloud.yaml" <<EOF
apiUrl: $api_url
tokenFile: $work/token
region: nyc1
EOF
if $shadow; then
  say "ours as a shadow (--shadow) beside DigitalOcean's CCM"
  shadow_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  "$target_dir/debug/do-like-cloud-controller-manager" \
    --cloud-provider=digitalocean --cloud-config="$work/cloud.yaml" --kubeconfig="$KUBECONFIG" \
    --leader-elect=false --configure-cloud-routes=false --allow-untagged-cloud --shadow \
    --insecure-serving --bind-address=127.0.0.1 --secure-port="$shadow_port" \
    >"$work/shadow.log" 2>&1 &
  shadow_pid=$!
  pids+=("$shadow_pid")
  sleep 20
  curl -sf "http://127.0.0.1:$shadow_port/debug/shadow/plan" >"$work/plan.json" || {
    say "FAILED: no plan from the shadow; its log:"; tail -40 "$work/shadow.log" >&2; exit 1; }
  kill -TERM "$shadow_pid"
  wait "$shadow_pid" 2>/dev/null || true
  say "the shadow's plan (controller, kind, object, action: why)"
  if ! python3 - "$work/plan.json" <<'EOF'
import json, re, sys
bad = []
for c in json.load(open(sys.argv[1]))["changes"]:
    obj = (c.get("namespace") + "/" if c.get("namespace") else "") + c.get("name", "")
    why = c.get("why", "")
    print(f'{c["controller"]}  {c["kind"]}  {obj}  {c["action"]}: {why}', file=sys.stderr)
    tags_only = c["action"] == "update" and re.fullmatch(r"tags: \[\] → \[[^]]*\]", why)
    if c["kind"] == "cloud/loadbalancers" and c["action"] != "refuse" and not tags_only:
        bad.append(obj)
sys.exit(1 if bad else 0)
EOF
  then
    say "FAILED: the shadow plans load-balancer changes besides the tags"
    exit 1
  fi
  say "the shadow plans the tags alone (and refuses the load balancer named by annotation)"
fi

say "the swap: DigitalOcean's CCM stopped, ours started"
kill -TERM "$do_pid"
wait "$do_pid" 2>/dev/null || true
stats requests >"$work/requests-before.json"
lbs_before="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("POST /v2/load_balancers", 0))' "$work/requests-before.json")"
"$target_dir/debug/do-like-cloud-controller-manager" \
  --cloud-provider=digitalocean --cloud-config="$work/cloud.yaml" --kubeconfig="$KUBECONFIG" \
  --leader-elect=false --configure-cloud-routes=false --allow-untagged-cloud \
  --bind-address=127.0.0.1 --secure-port=0 >"$work/ccm.log" 2>&1 &
ours_pid=$!
pids+=("$ours_pid")
sleep 20
after="$(service_lbs)"
lbs_after="$(stats requests | python3 -c 'import json,sys; print(json.load(sys.stdin).get("POST /v2/load_balancers", 0))')"
say "Services before and after the swap (name, load balancer ID, address)"
diff <(echo "$before") <(echo "$after") >&2 && echo "$after" >&2
say "requests ours sent in its first 20 s"
requests_since "$work/requests-before.json"
say "what ours refused or failed at (a load balancer named with do-loadbalancer-name is not adopted: docs/do-like-cloud.md)"
grep -iE 'not owned|notowned|not this service|error|panicked' "$work/ccm.log" | cut -c1-400 >&2 || true
if [ "$before" != "$after" ] || [ "$lbs_before" != "$lbs_after" ]; then
  say "FAILED: a load balancer was re-created or an address changed (creates $lbs_before → $lbs_after)"
  exit 1
fi
say "swap kept every load balancer: 0 re-created, 0 addresses changed"

say "the swap back: ours stopped, DigitalOcean's CCM started again"
kill -TERM "$ours_pid"
wait "$ours_pid" 2>/dev/null || true
stats requests >"$work/requests-before-back.json"
start_do_ccm do-ccm-back.log
sleep 20
back="$(service_lbs)"
lbs_back="$(stats requests | python3 -c 'import json,sys; print(json.load(sys.stdin).get("POST /v2/load_balancers", 0))')"
say "requests DigitalOcean's CCM sent in its first 20 s back"
requests_since "$work/requests-before-back.json"
grep -iE 'error|panic' "$work/do-ccm-back.log" | cut -c1-400 >&2 || true
if [ "$after" != "$back" ] || [ "$lbs_after" != "$lbs_back" ]; then
  diff <(echo "$after") <(echo "$back") >&2 || true
  say "FAILED: back under DigitalOcean's CCM, a load balancer was re-created or an address changed (creates $lbs_after → $lbs_back)"
  exit 1
fi
say "swap back kept every load balancer: 0 re-created, 0 addresses changed"
