#!/usr/bin/env bash
# Builds (or finds) kubeconfig-go (main.go beside this script): what client-go uses for one
# kubeconfig, for the differential test of our Rust kubeconfig reader. Built once into
#
#     ${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/kubeconfig-go/<key>/kubeconfig-go
#
# and reused; the key hashes go.mod, go.sum, main.go and `go version`, so a change of any
# of them builds again. Prints ONLY the binary's path on stdout (progress goes to stderr):
#
#     kubeconfig_go="$(tools/kubeconfig-go/build.sh)"
#     "$kubeconfig_go" path/to/kubeconfig
#
# Needs Go (see go.mod) and the Go module proxy (or a warm module cache). Concurrent
# callers are safe: one builds under a lock, the others wait and reuse its binary.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf 'kubeconfig-go build: %s\n' "$*" >&2; }
die() {
	printf 'kubeconfig-go build: ERROR: %s\n' "$*" >&2
	exit 1
}

command -v go >/dev/null 2>&1 || die "Go is not installed (need the version in $here/go.mod); install Go to run the kubeconfig differential test"

export GOWORK=off CGO_ENABLED=0
# Never switch to another Go toolchain behind the user's back.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# The committed go.sum pins every module; refuse to change it.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"

go_version="$(go version)" || die "\`go version\` failed"
cache="${CCM_CACHE_DIR:-${HOME:?HOME is not set}/.cache/ccm-rs}"
key="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" <(printf '%s\n' "$go_version") | sha256sum | cut -c1-16)"
out="$cache/kubeconfig-go/$key"
bin="$out/kubeconfig-go"

# The binary is only ever moved into place whole, so its presence means a finished build.
if [[ -x "$bin" ]]; then
	printf '%s\n' "$bin"
	exit 0
fi

mkdir -p "$out" || die "cannot create $out"
# One build at a time per folder; a second caller waits, then reuses it.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$out/.lock" || die "cannot create $out/.lock"
	flock 9 || die "cannot lock $out/.lock"
	if [[ -x "$bin" ]]; then
		log "built meanwhile by another build.sh in $out"
		printf '%s\n' "$bin"
		exit 0
	fi
fi
# Build into a scratch file beside the binary and rename it when done, so no half-written
# binary is ever at its final path.
tmp="$(mktemp "$out/.kubeconfig-go.XXXXXX")" || die "cannot create a scratch file in $out"
trap 'rm -f "$tmp"' EXIT

log "building with $go_version into $out"
start=$SECONDS
(cd "$here" && go build -trimpath -o "$tmp" .) >&2 ||
	die "building kubeconfig-go failed (see the Go output above)"
chmod +x "$tmp"
mv -f "$tmp" "$bin" || die "cannot move kubeconfig-go into $out"
log "built in $((SECONDS - start))s"
printf '%s\n' "$bin"
