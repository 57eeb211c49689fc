#!/usr/bin/env bash
# Checks the Helm chart(s) under charts/ with the pinned helm (tools/helm/build.sh):
#
# 1. `helm lint --strict` with the default values and with each value set
#    charts/<chart>/ci/<set>-values.yaml;
# 2. `helm template` of each value set equals its committed snapshot,
#    charts/<chart>/tests/snapshots/<set>.yaml (release name cloud-controller-manager,
#    namespace kube-system, or the one a `# namespace: NAME` line of the value set names);
#    examples/fake-cloud/tests/releases.rs has a real API server admit every snapshot;
# 3. every value set charts/<chart>/tests/refused/<case>.yaml is refused by
#    values.schema.json, with the message its `# expect: TEXT` line gives.
#
#   scripts/helm-check.sh            # check (the test command)
#   scripts/helm-check.sh --update   # rewrite the snapshots after a deliberate change
set -euo pipefail
cd "$(dirname "$0")/.."

update=false
case "${1:-}" in
  --update) update=true ;;
  "") ;;
  *)
    echo "usage: scripts/helm-check.sh [--update]" >&2
    exit 2
    ;;
esac

helm="$(tools/helm/build.sh)"
failures=0
log_file="$(mktemp)"
trap 'rm -f "$log_file"' EXIT
fail() {
  echo "helm-check: FAIL: $*" >&2
  failures=$((failures + 1))
}

charts=(charts/*/Chart.yaml)
[ -e "${charts[0]}" ] || {
  echo "helm-check: no chart under charts/" >&2
  exit 1
}

for chart_file in "${charts[@]}"; do
  chart="$(dirname "$chart_file")"
  sets=("$chart"/ci/*-values.yaml)
  [ -e "${sets[0]}" ] || fail "$chart: no value sets in $chart/ci/*-values.yaml"
  refused=("$chart"/tests/refused/*.yaml)
  [ -e "${refused[0]}" ] || fail "$chart: no refused value sets in $chart/tests/refused/"

  # 1. Lint.
  if ! "$helm" lint --strict "$chart" >"$log_file" 2>&1; then
    cat "$log_file" >&2
    fail "$chart: helm lint (default values)"
  fi
  for values in "${sets[@]}"; do
    [ -e "$values" ] || continue
    if ! "$helm" lint --strict "$chart" -f "$values" >"$log_file" 2>&1; then
      cat "$log_file" >&2
      fail "$chart: helm lint -f $values"
    fi
  done
  echo "helm-check: $chart: lint passed (defaults and ${#sets[@]} value sets)" >&2

  # 2. Snapshots.
  mkdir -p "$chart/tests/snapshots"
  for values in "${sets[@]}"; do
    [ -e "$values" ] || continue
    set_name="$(basename "$values" -values.yaml)"
    snapshot="$chart/tests/snapshots/$set_name.yaml"
    namespace="$(sed -n 's/^# namespace: *\([a-z0-9-]*\) *$/\1/p' "$values" | head -n 1)"
    namespace="${namespace:-kube-system}"
    if ! rendered="$("$helm" template cloud-controller-manager "$chart" \
      --namespace "$namespace" -f "$values")"; then
      fail "$chart: helm template -f $values"
      continue
    fi
    rendered="$(
      printf '# helm template cloud-controller-manager %s --namespace %s -f %s\n' \
        "$chart" "$namespace" "$values"
      printf '# Written by scripts/helm-check.sh --update; checked by scripts/helm-check.sh.\n'
      printf '%s\n' "$rendered"
    )"
    if $update; then
      printf '%s\n' "$rendered" >"$snapshot"
      echo "helm-check: wrote $snapshot" >&2
    elif [ ! -e "$snapshot" ]; then
      fail "$snapshot is missing; run scripts/helm-check.sh --update"
    elif ! diff -u "$snapshot" <(printf '%s\n' "$rendered") >&2; then
      fail "$snapshot differs from the chart's rendering (above); if deliberate, run scripts/helm-check.sh --update"
    fi
  done
  # A snapshot whose value set is gone is stale.
  for snapshot in "$chart"/tests/snapshots/*.yaml; do
    [ -e "$snapshot" ] || continue
    [ -e "$chart/ci/$(basename "$snapshot" .yaml)-values.yaml" ] ||
      fail "$snapshot has no value set $chart/ci/$(basename "$snapshot" .yaml)-values.yaml; remove it"
  done
  echo "helm-check: $chart: snapshots compared" >&2

  # 3. Refused values.
  for values in "${refused[@]}"; do
    [ -e "$values" ] || continue
    expect="$(sed -n 's/^# expect: //p' "$values" | head -n 1)"
    if [ -z "$expect" ]; then
      fail "$values has no '# expect: MESSAGE' line"
      continue
    fi
    if out="$("$helm" template cloud-controller-manager "$chart" -f "$values" 2>&1)"; then
      fail "$values was accepted; expected the schema to refuse it with: $expect"
    elif ! grep -qF -- "$expect" <<<"$out"; then
      fail "$values was refused, but without '$expect':"$'\n'"$out"
    fi
  done
  echo "helm-check: $chart: ${#refused[@]} bad value sets refused as expected" >&2
done

if [ "$failures" -gt 0 ]; then
  echo "helm-check: $failures failure(s)" >&2
  exit 1
fi
echo "helm-check: ok" >&2
