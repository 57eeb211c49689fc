#!/usr/bin/env bash
# The test command's Go builds, in one lane that scripts/test.sh starts in the background at
# its beginning: on a fresh machine they are a third of the run and leave a core idle while
# they download modules and link, which the Rust builds beside them use. Each is cached
# (keyed by its versions and module files) and is a quick check once built. In order:
# Go's cloud-controller-manager flags (built and compared), promtool, helm, the control
# plane and node binaries, and with CCM_BENCH_GO=1 the Go reference CCM of the benchmarks.
# Progress goes to stderr; each build is one step of the run's table (scripts/lib/steps.sh;
# test.sh runs this with start_lane).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/steps.sh

quiet() { "$@" >/dev/null; }

run_step "Go CCM flags (go-ccm-flags)" tools/go-ccm-flags/check.sh
run_step "build promtool" quiet tools/promtool/build.sh
run_step "build helm" quiet tools/helm/build.sh
run_step "build control plane and nodes" quiet tools/control-plane/build.sh
if [ -n "${CCM_BENCH_GO:-}" ]; then
  run_step "build Go reference CCM" quiet bench/build-go-reference.sh
fi
