#!/usr/bin/env bash
# Regenerates the flag list of Go's cloud-controller-manager (see main.go) and compares it
# with the committed crates/ccm-runtime/tests/data/go-ccm-flags.json, which the test
# crates/ccm-runtime/tests/go_flags.rs reads: a k8s.io upgrade that adds, removes or
# changes a flag fails here until the file (and our Options) follow.
#
#   tools/go-ccm-flags/check.sh          # compare (scripts/test.sh runs this)
#   tools/go-ccm-flags/check.sh --write  # rewrite the committed file
#
# Needs Go and the modules of go.mod (the same versions as bench/go-reference-ccm, so a
# warm module cache or the Go module proxy); Go's build cache makes a second run quick.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
committed="$here/../../crates/ccm-runtime/tests/data/go-ccm-flags.json"
committed_gates="$here/../../crates/ccm-runtime/src/flags/go-feature-gates.txt"

command -v go >/dev/null 2>&1 || {
	echo "go-ccm-flags: ERROR: Go is not installed (need the version in $here/go.mod)" >&2
	exit 1
}
export GOWORK=off CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"

fresh="$(mktemp)"
fresh_gates="$(mktemp)"
trap 'rm -f "$fresh" "$fresh_gates"' EXIT
# Kubernetes' release build tags, as tools/control-plane/build.sh builds kube-apiserver with:
# the packages both import (k8s.io/apiserver, client-go, grpc, ...) then compile once, and
# Go's build cache serves them to the other build.
(cd "$here" && go build -trimpath -tags=selinux,notest,grpcnotrace -o "$fresh.bin" . && "$fresh.bin" >"$fresh" && "$fresh.bin" gates >"$fresh_gates"; status=$?; rm -f "$fresh.bin"; exit $status)

if [[ "${1:-}" == "--write" ]]; then
	cp "$fresh" "$committed"
	cp "$fresh_gates" "$committed_gates"
	echo "go-ccm-flags: wrote $committed and $committed_gates" >&2
	exit 0
fi
if ! diff -u "$committed_gates" "$fresh_gates"; then
	echo "go-ccm-flags: ERROR: Go's feature gates differ from $committed_gates (above);" \
		"run tools/go-ccm-flags/check.sh --write" >&2
	exit 1
fi
if ! diff -u "$committed" "$fresh"; then
	echo "go-ccm-flags: ERROR: Go's flags differ from $committed (above);" \
		"run tools/go-ccm-flags/check.sh --write and update crates/ccm-runtime/src/app/options.rs" >&2
	exit 1
fi
echo "go-ccm-flags: $(grep -c '"name"' "$committed") flags, as committed" >&2
