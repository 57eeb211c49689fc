#!/usr/bin/env bash
# Kubernetes' own e2e specs (test/e2e of k8s.io/kubernetes at the cluster's version) against a
# real cluster on this machine with a bundled cloud's CCM installed from its release manifest.
# e2e.test runs in the cluster's network namespace with --provider=aws as the null provider,
# as cloud-provider-kind runs it. Needs root. Suites (--suite, default loadbalancers):
#
#   loadbalancers  [sig-network] LoadBalancers (network/loadbalancer.go): the DO-like cloud,
#                  3 nodes, its simulator's load balancers carrying the traffic
#   zones          [sig-scheduling] Multi-AZ Clusters (scheduling/ubernetes_lite.go) and
#                  [sig-network] Traffic Distribution (network/traffic_distribution.go): the
#                  fake cloud, 4 nodes, the 3 workers in zone-a, zone-b, zone-c by the CCM
#   networking     [sig-network] Networking Granular Checks: Pods (common/network/networking.go):
#                  the DO-like cloud, 3 nodes, Pod traffic across nodes only over the
#                  CCM's routes (ccm-local-cluster --pod-routes cloud); SCTP left out
#   dualstack      [sig-network] [Feature:IPv6DualStack] (network/dual_stack.go): the DO-like
#                  cloud, 3 nodes, an IPv4/IPv6 cluster (ccm-local-cluster --dual-stack
#                  --pod-routes cloud: node addresses of both families from the cloud, Pod
#                  routes of both families by the CCM); SCTP left out
#   loadbalancers-dualstack
#                  the LoadBalancers specs again, in that dual-stack cluster
#
#   scripts/e2e-upstream.sh [--suite S]            # every spec of the suite
#   scripts/e2e-upstream.sh --subset [--suite S]   # the fixed list CI runs (every suite's)
#   scripts/e2e-upstream.sh [--suite S] --focus RE # the specs whose name matches RE
#   scripts/e2e-upstream.sh --suite zones --nodes 7  # a bigger cluster than the suite's: with
#                                        # 7, two schedulable nodes per zone, which the
#                                        # multi-node Traffic Distribution specs need
#   scripts/e2e-upstream.sh --manifest FILE --image ARCHIVE ...
#                                        # another CCM (scripts/peer-digitalocean.sh --e2e):
#                                        # FILE instead of our release manifest, with
#                                        # ${CLOUD_API_URL} and ${CLOUD_API_TOKEN} set
#                                        # (the loadbalancers suite only)
#
# Ends with one line per suite: `e2e: N passed, M failed, K skipped`; exits non-zero if any
# failed. The JUnit reports and every cluster process's log stay in the folders it prints.
# See docs/e2e.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# The CI subset of each suite: specs that need nothing the cloud lacks, small enough for CI.
subset_loadbalancers=(
  '\[sig-network\] LoadBalancers .*should handle load balancer cleanup finalizer for service'
  '\[sig-network\] LoadBalancers .*should be able to create LoadBalancer Service without NodePort and change it'
  '\[sig-network\] LoadBalancers .*should be able to change the type and ports of a TCP service'
)
subset_zones=(
  '\[sig-network\] Traffic Distribution should route traffic to an endpoint in the same zone when using PreferClose'
)
subset_networking=(
  '\[sig-network\] Networking Granular Checks: Pods should function for intra-pod communication: http'
)
subset_dualstack=(
  '\[Feature:IPv6DualStack\] should have at least one dual-stack node'
)

suites=()
subset=false
nodes=""
focus=()
other=()
ccm=""
while [ $# -gt 0 ]; do
  case "$1" in
    --suite) suites=("${2:?--suite needs loadbalancers, zones, networking, dualstack or loadbalancers-dualstack}"); shift 2 ;;
    --suite=*) suites=("${1#--suite=}"); shift ;;
    --subset) subset=true; shift ;;
    --nodes) nodes="${2:?--nodes needs a number}"; shift 2 ;;
    --nodes=*) nodes="${1#--nodes=}"; shift ;;
    --focus) focus=("${2:?--focus needs a regular expression}"); shift 2 ;;
    --focus=*) focus=("${1#--focus=}"); shift ;;
    --manifest) other+=(--manifest "${2:?--manifest needs a file}"); ccm="$2"; shift 2 ;;
    --image) other+=(--image "${2:?--image needs an OCI archive}"); shift 2 ;;
    -h|--help) sed -n '2,30p' "scripts/$(basename "$0")"; exit 0 ;;
    *) echo "e2e-upstream.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# Another CCM (--manifest) is judged by the LoadBalancers specs only: the zones suite is the
# fake cloud's, and the networking suite needs a CCM that drives the simulator's routes.
if [ ${#suites[@]} = 0 ]; then
  if $subset && [ ${#other[@]} = 0 ]; then suites=(loadbalancers zones networking dualstack); else suites=(loadbalancers); fi
fi
for suite in "${suites[@]}"; do
  case "$suite" in
    loadbalancers) ;;
    zones|networking|dualstack|loadbalancers-dualstack) [ ${#other[@]} = 0 ] || { echo "e2e-upstream.sh: --manifest/--image are for the loadbalancers suite" >&2; exit 2; } ;;
    *) echo "e2e-upstream.sh: --suite: loadbalancers, zones, networking, dualstack or loadbalancers-dualstack, not '$suite'" >&2; exit 2 ;;
  esac
done
if $subset && [ ${#focus[@]} != 0 ]; then
  echo "e2e-upstream.sh: --subset or --focus, not both" >&2; exit 2
fi
[ "$(id -u)" = 0 ] || { echo "e2e-upstream.sh: needs root (network namespaces, containerd)" >&2; exit 1; }

say() { printf '\n==> %s\n' "$*" >&2; }
say "building: Kubernetes' binaries, e2e.test and its test images (cached after the first run), the providers' images, the launcher"
KUBEBUILDER_ASSETS="$(tools/control-plane/build.sh)"
export KUBEBUILDER_ASSETS
e2e="$(crates/ccm-test/e2e-upstream/build.sh)"
provider_images=()
for suite in "${suites[@]}"; do
  case "$suite" in
    zones) provider_images+=(fake-cloud-controller-manager) ;;
    *) provider_images+=(do-like-cloud-controller-manager do-like-api-simulator) ;;
  esac
done
# Inside scripts/test.sh (CCM_IMAGES_BUILT), this run's images are built already, for
# both platforms; rebuilding them here would rewrite archives that tests beside this read.
# shellcheck disable=SC2046 # image names have no spaces
[ -n "${CCM_IMAGES_BUILT:-}" ] ||
  scripts/images.sh --debug --platform linux/amd64 $(printf '%s\n' "${provider_images[@]}" | sort -u)
# (Inside scripts/test.sh, CCM_BINARIES_BUILT: the test build made it.)
[ -n "${CCM_BINARIES_BUILT:-}" ] || cargo build --quiet -p ccm-local-control-plane --bin ccm-local-cluster
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"

images=()
while read -r file reference; do
  [ -n "$file" ] || continue
  echo "e2e-upstream.sh: image $reference ($file)" >&2
  images+=(--image "$e2e/$file")
done <"$e2e/images.txt"

# e2e.test copies the kubeconfig into test-kuberc* folders of TMPDIR and leaves them: it
# gets a TMPDIR of its own, removed when this script ends.
scratch="$(mktemp -d /tmp/ccm-e2e-tmp.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT

# summarise REPORT ROWS SUITE: one line per spec of the JUnit report whose name matches the
# regular expression ROWS (the rest are the suite's own setup and teardown nodes), then
# `e2e (SUITE): N passed, M failed, K skipped`; fails if there is no spec at all.
summarise() {
  python3 - "$@" <<'EOF'
import glob, re, sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
rows = []
mine = re.compile(sys.argv[2])
for path in sorted(glob.glob(sys.argv[1] + "/junit*.xml")):
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        if not mine.search(name):
            continue
        skip = case.find("skipped")
        # A spec the focus left out is "skipped" with no reason; one the suite skipped
        # itself says why ("skipped - ...").
        if skip is not None and skip.get("message", "") == "skipped" and not (skip.text or "").strip():
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1; verdict = "FAILED"
        elif skip is not None:
            skipped += 1; verdict = "skipped"
        else:
            passed += 1; verdict = "passed"
        rows.append(f"  {verdict:8} {float(case.get('time', 0)):7.1f}s  {name}")
print("\n".join(rows))
print(f"e2e ({sys.argv[3]}): {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(0 if passed + failed + skipped > 0 else 1)
EOF
}

status=0
summaries=()
for suite in "${suites[@]}"; do
  # What each suite runs on (its cluster), what it runs (its focus) and which JUnit rows
  # are its specs.
  skip=()
  case "$suite" in
    loadbalancers|loadbalancers-dualstack)
      n=3
      if [ "$suite" = loadbalancers ]; then
        cluster=(--provider do-like)
        what="cluster with ${ccm:-the do-like provider}"
      else
        # The same specs in the dualstack suite's cluster.
        cluster=(--provider do-like --dual-stack --pod-routes cloud)
        what="dual-stack cluster with the do-like provider"
      fi
      suite_focus=('\[sig-network\] LoadBalancers')
      subset_focus=("${subset_loadbalancers[@]}")
      rows='LoadBalancers'
      timeout=90m ;;
    zones)
      # The first node is the control plane (tainted): the specs count schedulable nodes
      # only, so 4 nodes give one schedulable node in each of 3 zones.
      n=4
      cluster=(--provider fake --zones 3)
      what="cluster in 3 zones with the fake provider"
      suite_focus=('\[sig-scheduling\] Multi-AZ Clusters' '\[sig-network\] Traffic Distribution')
      subset_focus=("${subset_zones[@]}")
      rows='Multi-AZ Clusters|Traffic Distribution'
      timeout=60m ;;
    networking)
      n=3
      cluster=(--provider do-like --pod-routes cloud)
      what="cluster with the do-like provider, Pod routes by its CCM"
      suite_focus=('\[sig-network\] Networking Granular Checks: Pods')
      # No SCTP here (the project machine's kernel has none: CONFIG_IP_SCTP unset).
      skip=('\[Feature:SCTPConnectivity\]')
      subset_focus=("${subset_networking[@]}")
      rows='Networking Granular Checks: Pods'
      timeout=60m ;;
    dualstack)
      n=3
      cluster=(--provider do-like --dual-stack --pod-routes cloud)
      what="dual-stack cluster with the do-like provider, Pod routes by its CCM"
      suite_focus=('\[Feature:IPv6DualStack\]')
      skip=('\[Feature:SCTPConnectivity\]')
      subset_focus=("${subset_dualstack[@]}")
      rows='IPv6DualStack'
      timeout=60m ;;
  esac
  cluster+=(--nodes "${nodes:-$n}")
  what="a ${nodes:-$n}-node $what"
  if $subset; then
    run_focus=("${subset_focus[@]}")
    timeout=30m
  elif [ ${#focus[@]} != 0 ]; then
    run_focus=("${focus[@]}")
  else
    run_focus=("${suite_focus[@]}")
  fi
  # The last run's JUnit report of each suite, kept for reading under the target folder
  # (not a new /tmp folder per run).
  report="$target_dir/e2e-upstream/report-$suite${other:+-other}"
  rm -rf "$report"
  mkdir -p "$report"
  ginkgo=(--ginkgo.timeout="$timeout" --ginkgo.v --ginkgo.no-color --ginkgo.fail-on-empty)
  for re in "${run_focus[@]}"; do ginkgo+=(--ginkgo.focus="$re"); done
  for re in "${skip[@]}"; do ginkgo+=(--ginkgo.skip="$re"); done

  say "suite $suite: running e2e.test $("$e2e/e2e.test" --version 2>/dev/null | head -1) in $what"
  start=$(date +%s)
  "$target_dir/debug/ccm-local-cluster" "${cluster[@]}" --once "${images[@]}" "${other[@]}" \
    --exec env TMPDIR="$scratch" "$e2e/e2e.test" \
    --provider=aws \
    --kubectl-path="$KUBEBUILDER_ASSETS/kubectl" \
    --report-dir="$report" \
    "${ginkgo[@]}" || status=$?
  took=$(( $(date +%s) - start ))
  echo "e2e-upstream.sh: suite $suite took ${took}s; report in $report" >&2
  summary="$(summarise "$report" "$rows" "$suite")" || status=1
  summaries+=("$summary (${took}s)")
  printf '%s\n' "$summary"
done
# The last lines: one per suite.
[ ${#suites[@]} = 1 ] || printf '%s\n' "${summaries[@]}" | grep '^e2e ('
exit "$status"
