#!/usr/bin/env bash
# Builds (or finds) the helm command used by scripts/release-manifests.sh,
# scripts/helm-check.sh and the chart tests: `helm.sh/helm/v4/cmd/helm` at the version
# pinned in go.mod/go.sum beside this script, built once into
#
#     ${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/helm/<version>-<key of go.mod and go.sum>/helm
#
# and reused (a stamp file is written last, so a half-finished build is redone).
# Prints ONLY the binary's path on stdout (progress goes to stderr), so:
#
#     HELM="$(tools/helm/build.sh)"
#     "$HELM" template charts/fake-cloud
#
# If HELM names an executable, nothing is built and it is printed (use another helm
# at your own risk: the committed snapshots are rendered by the pinned one).
#
# Needs Go (see go.mod) and the Go module proxy. Go's own caches make a second build fast.
# See docs/helm.md.
set -euo pipefail

readonly HELM_VERSION=v4.3.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf 'helm build: %s\n' "$*" >&2; }
die() {
	printf 'helm build: ERROR: %s\n' "$*" >&2
	exit 1
}

# 1. An explicit binary.
if [[ -n "${HELM:-}" ]]; then
	[[ -x "$HELM" ]] || die "HELM=$HELM is not an executable file; unset it to build helm $HELM_VERSION"
	log "using HELM=$HELM; building nothing"
	printf '%s\n' "$HELM"
	exit 0
fi

# The pinned version must be the one go.mod requires, or the stamp would lie.
grep -q "^require helm.sh/helm/v4 $HELM_VERSION\$" "$here/go.mod" ||
	die "$here/go.mod does not require helm.sh/helm/v4 $HELM_VERSION; update HELM_VERSION in build.sh and go.mod together"

# 2. Our own cache folder, keyed by the version and by go.mod and go.sum, so that a change
# of either builds again.
cache="${CCM_CACHE_DIR:-${HOME:?HOME is not set}/.cache/ccm-rs}"
key="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)"
out="$cache/helm/$HELM_VERSION-$key"
stamp="$out/.complete"

if [[ -f "$stamp" && -x "$out/helm" ]]; then
	log "helm already built in $out"
	printf '%s\n' "$out/helm"
	exit 0
fi

command -v go >/dev/null 2>&1 || die "Go is not installed (need the version in $here/go.mod); install Go, or set HELM to a helm $HELM_VERSION binary"

mkdir -p "$out" || die "cannot create $out"
# One build at a time per folder; a second caller waits, then reuses it.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$out/.lock" || die "cannot create $out/.lock"
	flock 9 || die "cannot lock $out/.lock"
	if [[ -f "$stamp" && -x "$out/helm" ]]; then
		log "helm built meanwhile by another build.sh in $out"
		printf '%s\n' "$out/helm"
		exit 0
	fi
fi
rm -f "$stamp"
tmp="$(mktemp -d "$out/.build.XXXXXX")" || die "cannot create a scratch folder in $out"
trap 'rm -rf "$tmp"' EXIT

export GOWORK=off CGO_ENABLED=0
# Never switch to another Go toolchain behind the user's back.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# The committed go.sum pins every module; refuse to change it.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"

ldflags="-s -w"
ldflags+=" -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

log "building helm $HELM_VERSION into $out (a cold build downloads the modules and compiles for a few minutes)"
start=$SECONDS
(cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$tmp/helm" helm.sh/helm/v4/cmd/helm) >&2 ||
	die "building helm.sh/helm/v4/cmd/helm failed (see the Go output above)"
mv -f "$tmp/helm" "$out/helm" || die "cannot move helm into $out"
log "built helm in $((SECONDS - start))s ($(du -h "$out/helm" | cut -f1))"

"$out/helm" version --short >&2 || die "$out/helm does not run"
printf 'helm=%s\n' "$HELM_VERSION" >"$stamp"
log "done"
printf '%s\n' "$out/helm"
