#!/usr/bin/env bash
# Builds (or finds) promtool, Prometheus' rule checker and rule unit-test runner, from
# github.com/prometheus/prometheus/cmd/promtool at the version pinned in go.mod and go.sum
# (Go module v0.316.0 = Prometheus v3.16.0). scripts/alerts.sh uses it to check and test
# the alerting rules in deploy/monitoring/.
#
# Prints ONLY the binary's path on stdout (progress goes to stderr), so:
#
#     promtool="$(tools/promtool/build.sh)"
#
# - If PROMTOOL names an executable, nothing is built and it is printed (its version is
#   not checked: the rules and tests are written for Prometheus v3).
# - Else promtool is built once into
#   ${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/promtool/v3.16.0-<key>/promtool and reused (the
#   key hashes go.mod, go.sum and the build tags); a stamp
#   file is written last, so a half-finished build is redone.
#
# Needs Go (see go.mod) and the Go module proxy (or a warm module cache). A cold build
# downloads the modules and compiles for a few minutes; Go's caches
# ($(go env GOMODCACHE), $(go env GOCACHE)) make a rebuild fast.
set -euo pipefail

# Prometheus' release, and the Go module version that mirrors it (must match go.mod).
readonly PROMETHEUS_VERSION=v3.16.0
readonly MODULE_VERSION=v0.316.0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf 'promtool: %s\n' "$*" >&2; }
die() {
	printf 'promtool: ERROR: %s\n' "$*" >&2
	exit 1
}

# 1. An explicit binary.
if [[ -n "${PROMTOOL:-}" ]]; then
	[[ -x "$PROMTOOL" ]] || die "PROMTOOL=$PROMTOOL is not an executable file; unset it to build promtool"
	log "using PROMTOOL=$PROMTOOL; building nothing"
	printf '%s\n' "$PROMTOOL"
	exit 0
fi

grep -qE "^(require )?[[:space:]]*github.com/prometheus/prometheus $MODULE_VERSION\$" "$here/go.mod" ||
	die "$here/go.mod does not require github.com/prometheus/prometheus $MODULE_VERSION; update MODULE_VERSION and PROMETHEUS_VERSION in $0 together with go.mod"

# Build tags: netgo (no cgo resolver), and remove_all_sd: the rules checker needs none of
# Prometheus' service-discovery plugins (AWS, Azure, GCE, ...), which are most of a cold
# build's modules and compile time.
readonly TAGS=netgo,remove_all_sd

# 2. Our own cache folder, keyed by the version and by what the build is made of (go.mod,
# go.sum, the tags), so that a change of any of them builds again.
cache="${CCM_CACHE_DIR:-${HOME:?HOME is not set}/.cache/ccm-rs}"
key="$(cat "$here/go.mod" "$here/go.sum" <(echo "$TAGS") | sha256sum | cut -c1-12)"
out="$cache/promtool/$PROMETHEUS_VERSION-$key"
bin="$out/promtool"
stamp="$out/.complete"

if [[ -f "$stamp" && -x "$bin" ]]; then
	log "promtool $PROMETHEUS_VERSION already built in $out"
	printf '%s\n' "$bin"
	exit 0
fi

command -v go >/dev/null 2>&1 || die "Go is not installed (need the version in $here/go.mod); install Go, or set PROMTOOL to a promtool v3 binary"

mkdir -p "$out" || die "cannot create $out"
# One build at a time per folder; a second caller waits, then reuses it.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$out/.lock" || die "cannot create $out/.lock"
	flock 9 || die "cannot lock $out/.lock"
	if [[ -f "$stamp" && -x "$bin" ]]; then
		log "promtool built meanwhile by another build.sh in $out"
		printf '%s\n' "$bin"
		exit 0
	fi
fi
rm -f "$stamp"
# Build into a scratch file beside the binary and move it in when done, so no
# half-written binary is ever at its final path.
tmp="$(mktemp "$out/.promtool.XXXXXX")" || die "cannot create a scratch file in $out"
trap 'rm -f "$tmp"' EXIT

export GOWORK=off CGO_ENABLED=0
# Never switch to another Go toolchain behind the user's back.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# The committed go.sum pins every module; refuse to change it.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"

# Stamp the version as Prometheus' own release build does (`promtool --version`).
ldflags="-s -w"
ldflags+=" -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}"
ldflags+=" -X github.com/prometheus/common/version.Branch=HEAD"

log "building promtool $PROMETHEUS_VERSION (github.com/prometheus/prometheus $MODULE_VERSION) into $out"
start=$SECONDS
(cd "$here" && go build -trimpath -tags="$TAGS" -ldflags "$ldflags" -o "$tmp" \
	github.com/prometheus/prometheus/cmd/promtool) >&2 ||
	die "building promtool failed (see the Go output above)"
chmod +x "$tmp"
mv -f "$tmp" "$bin" || die "cannot move promtool into $out"
log "built promtool in $((SECONDS - start))s ($(du -h "$bin" | cut -f1))"

"$bin" --version >&2 || die "$bin does not run"
printf 'prometheus=%s\nmodule=%s\n' "$PROMETHEUS_VERSION" "$MODULE_VERSION" >"$stamp"
log "done"
printf '%s\n' "$bin"
