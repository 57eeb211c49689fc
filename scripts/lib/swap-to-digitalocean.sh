#!/usr/bin/env bash
# The swap from ours to DigitalOcean's CCM in a real cluster, with requests running through
# the load balancers meanwhile. Run by `scripts/peer-digitalocean.sh SOURCE_DIR
# --swap-in-cluster` through `ccm-local-cluster --exec` (in the cluster's network namespace,
# KUBECONFIG set, the DO-like simulator's CLOUD_API_URL, CLOUD_API_TOKEN and
# CLOUD_API_ADMIN_TOKEN in the environment), after ours has initialised the Nodes:
#
#   swap-to-digitalocean.sh KUBECTL MANIFEST
#
#   1. a web Deployment and two LoadBalancer Services (one with DigitalOcean annotations)
#      get their load balancers from ours;
#   2. curl runs through both addresses, five requests a second each, from here on;
#   3. ours' Deployment is deleted and DigitalOcean's CCM applied from MANIFEST (its release
#      manifest as peer-digitalocean.sh renders it, ${CLOUD_API_URL} and ${CLOUD_API_TOKEN}
#      in it filled in here), then 60 s for its first passes;
#   4. the pass: the same load balancer IDs and addresses, none created or deleted in the
#      cloud, no request failed. It prints the figures and the requests DigitalOcean's CCM
#      sent, and fails otherwise.
set -euo pipefail
kubectl="${1:?usage: swap-to-digitalocean.sh KUBECTL MANIFEST}"
manifest="${2:?usage: swap-to-digitalocean.sh KUBECTL MANIFEST}"
: "${CLOUD_API_URL:?}" "${CLOUD_API_TOKEN:?}" "${CLOUD_API_ADMIN_TOKEN:?}"
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/local-cluster.sh
source scripts/lib/local-cluster.sh # say, service_lbs, request_delta
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

stats() { # the simulator's request counts by route
  curl -sf -H "Authorization: Bearer $CLOUD_API_ADMIN_TOKEN" "$CLOUD_API_URL/admin/stats" |
    python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["requests"], sort_keys=True))'
}
count() { python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get(sys.argv[2], 0))' "$1" "$2"; }

say "ours: a web Deployment and two LoadBalancer Services"
"$kubectl" apply -f - >&2 <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: localhost/ccm-test/web:1.0, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: plain, namespace: default}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata:
  name: tuned
  namespace: default
  annotations:
    service.beta.kubernetes.io/do-loadbalancer-size-unit: "2"
    service.beta.kubernetes.io/do-loadbalancer-algorithm: least_connections
    service.beta.kubernetes.io/do-loadbalancer-healthcheck-check-interval-seconds: "5"
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
EOF
for _ in $(seq 1 300); do
  [ "$(service_lbs | awk 'NF == 3' | wc -l)" = 2 ] && break
  sleep 0.5
done
before="$(service_lbs)"
echo "$before" >&2
[ "$(echo "$before" | awk 'NF == 3' | wc -l)" = 2 ] || { say "FAILED: ours gave the Services no load balancer"; exit 1; }
for ip in $(echo "$before" | awk '{print $3}'); do
  for _ in $(seq 1 120); do curl -sf -m 2 "http://$ip/" >/dev/null && break; sleep 0.5; done
done

say "requests through both addresses from now on"
for ip in $(echo "$before" | awk '{print $3}'); do
  (
    while :; do
      if curl -sf -m 2 "http://$ip/" >/dev/null; then echo ok; else echo "failed $(date +%T.%N)"; fi
      sleep 0.2
    done
  ) >"$work/requests-$ip" &
done
sleep 5
stats_before="$(stats)"

say "the swap: ours deleted, DigitalOcean's CCM applied from its release manifest"
"$kubectl" -n kube-system delete deployment cloud-controller-manager --wait=true --timeout=120s >&2
sed -e "s|\${CLOUD_API_URL}|$CLOUD_API_URL|g" -e "s|\${CLOUD_API_TOKEN}|$CLOUD_API_TOKEN|g" "$manifest" |
  "$kubectl" apply -f - >&2
"$kubectl" -n kube-system rollout status deployment digitalocean-cloud-controller-manager --timeout=180s >&2
sleep 60
after="$(service_lbs)"
stats_after="$(stats)"
kill $(jobs -p) 2>/dev/null || true
wait 2>/dev/null || true

say "Services before and after (name, load balancer ID, address)"
diff <(echo "$before") <(echo "$after") >&2 && echo "$after" >&2
say "requests DigitalOcean's CCM sent to the cloud after the swap"
request_delta "$stats_before" "$stats_after" >&2
answered=$(cat "$work"/requests-* | grep -c '^ok' || true)
failed=$(cat "$work"/requests-* | grep -c '^failed' || true)
created=$(( $(count "$stats_after" "POST /v2/load_balancers") - $(count "$stats_before" "POST /v2/load_balancers") ))
deleted=$(( $(count "$stats_after" "DELETE /v2/load_balancers/{id}") - $(count "$stats_before" "DELETE /v2/load_balancers/{id}") ))
say "swap to DigitalOcean's CCM: $answered requests answered, $failed failed; $created load balancers created, $deleted deleted"
grep -h '^failed' "$work"/requests-* | head -5 >&2 || true
if [ "$before" != "$after" ] || [ "$failed" != 0 ] || [ "$created" != 0 ] || [ "$deleted" != 0 ]; then
  say "FAILED: the swap changed a load balancer or dropped requests"
  exit 1
fi
say "the swap kept every load balancer and every request"
