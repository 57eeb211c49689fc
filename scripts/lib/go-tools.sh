#!/usr/bin/env bash
# The Go builds the tests need before they start, in one lane that scripts/test.sh starts in
# the background at its beginning: on a fresh machine they leave a core idle while they
# download modules and link, which the Rust builds beside them use. Each is cached (keyed by
# its versions and module files) and is a quick check once built. In order: the control
# plane and node binaries (most of Kubernetes' packages, which the later Go builds then find
# in Go's build cache), helm (the chart checks before the tests, and a cluster test), and
# with CCM_BENCH_GO=1 the Go reference CCM of the benchmarks. The Go builds only checks need
# (promtool, Go's CCM flags) run as jobs among the tests instead. Progress goes to stderr;
# each build is one step of the run's table (scripts/lib/steps.sh; test.sh runs this with
# start_lane).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/steps.sh

quiet() { "$@" >/dev/null; }

run_step "build control plane and nodes" quiet tools/control-plane/build.sh
run_step "build helm" quiet tools/helm/build.sh
if [ -n "${CCM_BENCH_GO:-}" ]; then
  run_step "build Go reference CCM" quiet bench/build-go-reference.sh
fi
