#!/usr/bin/env bash
# The DigitalOcean-like quickstart, on one machine: a local kube-apiserver + etcd, the API
# simulator with three droplets, do-like-cloud-controller-manager against both, three Nodes
# registered as kubelets with --cloud-provider=external register them (tainted), and a
# LoadBalancer Service. Prints what the CCM did, leaves the kubeconfig for kubectl, and stops
# everything on Ctrl-C.
#
#   examples/do-like-cloud/quickstart.sh          # runs until Ctrl-C
#   examples/do-like-cloud/quickstart.sh --once   # shows the result and stops
set -euo pipefail
cd "$(dirname "$0")/../.."

once=false
[ "${1:-}" = "--once" ] && once=true

# shellcheck source=scripts/lib/local-cluster.sh
source scripts/lib/local-cluster.sh
build_and_start_cluster ccm-do-like -p ccm-do-like-cloud -p ccm-do-like-simulator --bins

say "starting do-like-api-simulator (three droplets: node-1, node-2, node-3)"
# A random token, in a file only the simulator and the CCM read; it is never printed.
python3 -c 'import secrets; print(secrets.token_hex(16))' >"$work/token"
chmod 600 "$work/token"
start_simulator --token-file "$work/token" --state-file "$work/simulator-state.json" \
  --droplets 3 --lb-activation-ms 1500

say "starting do-like-cloud-controller-manager against $api_url"
cat >"$work/cloud.yaml" <<EOF
apiUrl: $api_url
tokenFile: $work/token
region: nyc1
cacheTtlSeconds: 5
EOF
"$target_dir/debug/do-like-cloud-controller-manager" \
  --cloud-provider=digitalocean --cloud-config="$work/cloud.yaml" --kubeconfig="$KUBECONFIG" \
  --cluster-name=quickstart --cluster-cidr=10.244.0.0/16 --route-reconciliation-period=2s \
  --bind-address=127.0.0.1 --secure-port=10258 --insecure-serving \
  >"$work/ccm.log" 2>&1 &
pids+=($!)

say "registering three Nodes as kubelets would (tainted) and a LoadBalancer Service"
register_nodes node- 3
"$kubectl" apply -f - >&2 <<'EOF'
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  annotations:
    service.beta.kubernetes.io/do-loadbalancer-algorithm: least_connections
    service.beta.kubernetes.io/do-loadbalancer-protocol: http
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
EOF

say "waiting for the cloud-controller-manager"
ok=false
for _ in $(seq 1 300); do
  initialized=$("$kubectl" get nodes -o jsonpath='{range .items[*]}{.spec.providerID}{"\n"}{end}' | grep -c '^digitalocean://' || true)
  ingress=$("$kubectl" get service web -o jsonpath='{.status.loadBalancer.ingress[0].ip}' 2>/dev/null || true)
  routed=$("$kubectl" get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="NetworkUnavailable")].reason}{"\n"}{end}' | grep -c '^RouteCreated$' || true)
  if [ "$initialized" = 3 ] && [ "$routed" = 3 ] && [ -n "$ingress" ]; then ok=true; break; fi
  sleep 0.2
done

say "Nodes"
"$kubectl" get nodes -o custom-columns='NAME:.metadata.name,PROVIDER-ID:.spec.providerID,TYPE:.metadata.labels.node\.kubernetes\.io/instance-type,REGION:.metadata.labels.topology\.kubernetes\.io/region,ADDRESSES:.status.addresses[*].address,ROUTE:.status.conditions[?(@.type=="NetworkUnavailable")].reason,TAINTS:.spec.taints[*].key'
say "Services"
"$kubectl" get services -o custom-columns='NAME:.metadata.name,TYPE:.spec.type,INGRESS-IP:.status.loadBalancer.ingress[*].ip,LB-ID:.metadata.annotations.kubernetes\.digitalocean\.com/load-balancer-id,FINALIZERS:.metadata.finalizers[*]'
say "the simulator's load balancers and routes"
python3 - "$api_url" "$work/token" <<'EOF'
import json, sys, urllib.request
url, token = sys.argv[1], open(sys.argv[2]).read().strip()
for path, key in (("/v2/load_balancers", "load_balancers"), ("/v2/x-routes", "routes")):
    req = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + token})
    for item in json.load(urllib.request.urlopen(req))[key]:
        if key == "load_balancers":
            print(f"LB {item['id']} name={item['name']} region={item['region']['slug']} "
                  f"status={item['status']} ip={item['ip']} droplets={item['droplet_ids']} "
                  f"algorithm={item['algorithm']} tags={item['tags']}")
        else:
            print(f"route {item['destination']} -> {item['target']} tags={item['tags']}")
EOF

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
wait "${pids[2]}"
