#!/usr/bin/env bash
# Builds (or finds) the Go reference cloud-controller-manager of the benchmarks
# (bench/go-reference-ccm: k8s.io/cloud-provider's sample/basic_main.go with an
# in-memory cloud registered as "fake").
#
# Prints ONLY the binary's path on stdout (progress goes to stderr), so:
#
#     GO_CCM="$(bench/build-go-reference.sh)"
#
# The binary is cached under ${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/bench/,
# keyed by a hash of go.mod, go.sum and the *.go files: a change rebuilds it.
# Needs Go (see go-reference-ccm/go.mod) and the Go module proxy or a warm
# module cache. See docs/benchmarks.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/go-reference-ccm"

log() { printf 'go-reference-ccm: %s\n' "$*" >&2; }
die() {
	printf 'go-reference-ccm: ERROR: %s\n' "$*" >&2
	exit 1
}

[[ -f "$src/go.mod" && -f "$src/go.sum" ]] || die "$src/go.mod or go.sum is missing"
command -v go >/dev/null 2>&1 || die "Go is not installed (need the version in $src/go.mod)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum is not installed"

# Kubernetes' release build tags (as its own binaries and tools/control-plane/build.sh use):
# the packages this shares with kube-apiserver compile once for both.
readonly TAGS=selinux,notest,grpcnotrace
key="$(cd "$src" && cat go.mod go.sum $(LC_ALL=C ls -- *.go) <(echo "$TAGS") | sha256sum | cut -c1-16)"
cache="${CCM_CACHE_DIR:-${HOME:?HOME is not set}/.cache/ccm-rs}/bench"
bin="$cache/go-reference-ccm-$key"

if [[ -x "$bin" ]]; then
	log "already built: $bin"
	printf '%s\n' "$bin"
	exit 0
fi

mkdir -p "$cache" || die "cannot create $cache"
tmp="$(mktemp "$cache/.go-reference-ccm.XXXXXX")" || die "cannot create a scratch file in $cache"
trap 'rm -f "$tmp"' EXIT

export GOWORK=off CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# The committed go.sum pins every module; refuse to change it.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"

start=$SECONDS
log "building into $bin (a cold build compiles k8s.io/cloud-provider for a few minutes)"
(cd "$src" && go build -trimpath -tags="$TAGS" \
	-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v1.36.3 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36" \
	-o "$tmp" .) >&2 || die "go build failed (see the Go output above)"
chmod +x "$tmp"
"$tmp" --version >&2 || die "the built binary does not run"
mv -f "$tmp" "$bin" || die "cannot move the binary to $bin"
log "built in $((SECONDS - start))s ($(du -h "$bin" | cut -f1))"
printf '%s\n' "$bin"
