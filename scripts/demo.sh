#!/usr/bin/env bash
# The main job, on one machine: a local kube-apiserver + etcd, the fake cloud's
# cloud-controller-manager against it, three Nodes registered as kubelets with
# --cloud-provider=external register them (tainted), and a LoadBalancer Service. Prints what
# the CCM did, leaves the kubeconfig for kubectl, and stops everything on Ctrl-C.
#
#   scripts/demo.sh          # runs until Ctrl-C
#   scripts/demo.sh --once   # shows the result and stops (used by the tests)
set -euo pipefail
cd "$(dirname "$0")/.."

once=false
[ "${1:-}" = "--once" ] && once=true

# shellcheck source=scripts/lib/local-cluster.sh
source scripts/lib/local-cluster.sh
build_and_start_cluster ccm-demo -p ccm-fake-cloud

say "starting fake-cloud-controller-manager"
cat >"$work/cloud.yaml" <<'EOF'
# Every Node name is an instance of the fake cloud.
nodesAreInstances: true
defaults: {instanceType: fake-medium, zone: demo-zone-a, region: demo-region}
EOF
"$target_dir/debug/fake-cloud-controller-manager" \
  --cloud-provider=fake --cloud-config="$work/cloud.yaml" --kubeconfig="$KUBECONFIG" \
  --cluster-cidr=10.244.0.0/16 --route-reconciliation-period=2s \
  --bind-address=127.0.0.1 --secure-port=10258 --insecure-serving \
  >"$work/ccm.log" 2>&1 &
pids+=($!)

say "registering three Nodes as kubelets would (tainted) and a LoadBalancer Service"
register_nodes demo-worker- 3
"$kubectl" apply -f - >&2 <<'EOF'
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
EOF

say "waiting for the cloud-controller-manager"
ok=false
for _ in $(seq 1 300); do
  initialized=$("$kubectl" get nodes -o jsonpath='{range .items[*]}{.spec.providerID}{"\n"}{end}' | grep -c '^fake://' || true)
  ingress=$("$kubectl" get service web -o jsonpath='{.status.loadBalancer.ingress[0].ip}' 2>/dev/null || true)
  routed=$("$kubectl" get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="NetworkUnavailable")].reason}{"\n"}{end}' | grep -c '^RouteCreated$' || true)
  if [ "$initialized" = 3 ] && [ "$routed" = 3 ] && [ -n "$ingress" ]; then ok=true; break; fi
  sleep 0.2
done

say "Nodes"
"$kubectl" get nodes -o custom-columns='NAME:.metadata.name,PROVIDER-ID:.spec.providerID,TYPE:.metadata.labels.node\.kubernetes\.io/instance-type,ZONE:.metadata.labels.topology\.kubernetes\.io/zone,REGION:.metadata.labels.topology\.kubernetes\.io/region,ADDRESSES:.status.addresses[*].address,ROUTE:.status.conditions[?(@.type=="NetworkUnavailable")].reason,TAINTS:.spec.taints[*].key'
say "Services"
"$kubectl" get services -o wide
say "Events"
"$kubectl" get events -A -o custom-columns='REASON:.reason,OBJECT:.involvedObject.name,SOURCE:.source.component,COUNT:.count,MESSAGE:.message' | head -20

if [ "$ok" != true ]; then
  say "the CCM did not finish in time; its log:"
  tail -40 "$work/ccm.log" >&2
  exit 1
fi

if $once; then
  say "done"
  exit 0
fi
say "everything runs: export KUBECONFIG=$KUBECONFIG and use $kubectl; Ctrl-C stops it all"
wait "${pids[1]}"
