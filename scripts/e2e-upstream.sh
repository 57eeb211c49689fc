#!/usr/bin/env bash
# Kubernetes' own `[sig-network] LoadBalancers` e2e specs (test/e2e/network/loadbalancer.go
# of k8s.io/kubernetes at the cluster's version) against a real cluster on this machine with
# the DigitalOcean-like cloud: its CCM installed from the release manifest, its simulator's
# data plane carrying the traffic. e2e.test runs in the cluster's network namespace with
# --provider=aws as the null provider, as cloud-provider-kind runs it. Needs root.
#
#   scripts/e2e-upstream.sh              # every LoadBalancers spec (about an hour)
#   scripts/e2e-upstream.sh --subset     # the fixed list CI runs
#   scripts/e2e-upstream.sh --focus RE   # the specs whose name matches RE
#   scripts/e2e-upstream.sh --manifest FILE --image ARCHIVE ...
#                                        # another CCM (scripts/peer-digitalocean.sh --e2e):
#                                        # FILE instead of our release manifest, with
#                                        # ${CLOUD_API_URL} and ${CLOUD_API_TOKEN} set
#
# Ends with one line: `e2e: N passed, M failed, K skipped`; exits non-zero if any failed.
# The JUnit report and every cluster process's log stay in the folder it prints.
# See docs/e2e.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# The CI subset: specs that need nothing the DO-like cloud lacks, small enough for CI.
subset=(
  'should handle load balancer cleanup finalizer for service'
  'should be able to create LoadBalancer Service without NodePort and change it'
  'should be able to change the type and ports of a TCP service'
)

focus=('\[sig-network\] LoadBalancers')
timeout=90m
other=()
ccm="the do-like provider"
while [ $# -gt 0 ]; do
  case "$1" in
    --subset)
      focus=()
      for name in "${subset[@]}"; do focus+=("\\[sig-network\\] LoadBalancers .*$name"); done
      timeout=30m
      shift ;;
    --focus) focus=("${2:?--focus needs a regular expression}"); shift 2 ;;
    --focus=*) focus=("${1#--focus=}"); shift ;;
    --manifest) other+=(--manifest "${2:?--manifest needs a file}"); ccm="$2"; shift 2 ;;
    --image) other+=(--image "${2:?--image needs an OCI archive}"); shift 2 ;;
    -h|--help) sed -n '2,18p' "scripts/$(basename "$0")"; exit 0 ;;
    *) echo "e2e-upstream.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "e2e-upstream.sh: needs root (network namespaces, containerd)" >&2; exit 1; }

say() { printf '\n==> %s\n' "$*" >&2; }
say "building: Kubernetes' binaries, e2e.test and its test images (cached after the first run), the provider's images, the launcher"
KUBEBUILDER_ASSETS="$(tools/control-plane/build.sh)"
export KUBEBUILDER_ASSETS
e2e="$(crates/ccm-test/e2e-upstream/build.sh)"
# Inside scripts/test.sh (CCM_IMAGES_BUILT), this run's images are built already, for
# both platforms; rebuilding them here would rewrite archives that tests beside this read.
[ -n "${CCM_IMAGES_BUILT:-}" ] || scripts/images.sh --debug --platform linux/amd64 do-like-cloud-controller-manager do-like-api-simulator
# (Inside scripts/test.sh, CCM_BINARIES_BUILT: the test build made it.)
[ -n "${CCM_BINARIES_BUILT:-}" ] || cargo build --quiet -p ccm-local-control-plane --bin ccm-local-cluster
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"

images=()
while read -r file reference; do
  [ -n "$file" ] || continue
  echo "e2e-upstream.sh: image $reference ($file)" >&2
  images+=(--image "$e2e/$file")
done <"$e2e/images.txt"

# The last run's JUnit report, kept for reading under the target folder (not a new /tmp
# folder per run).
report="$target_dir/e2e-upstream/report${other:+-other}"
rm -rf "$report"
mkdir -p "$report"
ginkgo=(--ginkgo.timeout="$timeout" --ginkgo.v --ginkgo.no-color --ginkgo.fail-on-empty)
for re in "${focus[@]}"; do ginkgo+=(--ginkgo.focus="$re"); done

# e2e.test copies the kubeconfig into test-kuberc* folders of TMPDIR and leaves them: it
# gets a TMPDIR of its own, removed when this script ends.
scratch="$(mktemp -d /tmp/ccm-e2e-tmp.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT

say "running e2e.test $("$e2e/e2e.test" --version 2>/dev/null | head -1) in a 3-node cluster with $ccm"
start=$(date +%s)
status=0
"$target_dir/debug/ccm-local-cluster" --provider do-like --nodes 3 --once "${images[@]}" "${other[@]}" \
  --exec env TMPDIR="$scratch" "$e2e/e2e.test" \
  --provider=aws \
  --kubectl-path="$KUBEBUILDER_ASSETS/kubectl" \
  --report-dir="$report" \
  "${ginkgo[@]}" || status=$?
echo "e2e-upstream.sh: suite took $(( $(date +%s) - start ))s; report in $report" >&2

# One line from the JUnit report: the specs that ran or were skipped by the suite itself
# (not the ones the focus left out).
python3 - "$report" <<'EOF'
import glob, sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
rows = []
for path in sorted(glob.glob(sys.argv[1] + "/junit*.xml")):
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        if "LoadBalancers" not in name:
            continue  # the suite's own setup and teardown nodes
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
print(f"e2e: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(0 if passed + failed + skipped > 0 else 1)
EOF
exit "$status"
